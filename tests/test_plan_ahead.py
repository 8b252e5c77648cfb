"""Plans built ahead (csrc/runtime/plan_ahead.h): when the shapes of new
plans grow by the same step twice (a decoder's past), the engine builds the
next step's plan on a background thread. And plans built outside the plan
cache's lock: threads that need the same new plan wait for one build, threads
with other shapes go on. Results come from an independent reference
(onnxruntime, NumPy); the stats say which plans were built and used."""

from __future__ import annotations

import gc
import os
import threading
import time

import numpy as np
import pytest
from onnx import helper

from conftest import PLAN_DEVICES, load_on
from merged_decoder import MERGED_DECODER, greedy_steps_against_onnxruntime
from onnx_helpers import make_model


@pytest.fixture(params=PLAN_DEVICES)
def device(request):
    return request.param


def _add_model():
    """y = x + w: x [1, n], w [m] broadcast (n == m, or either is 1)."""
    return make_model([helper.make_node("Add", ["x", "w"], ["y"])],
                      [("x", np.float32, [1, "n"]), ("w", np.float32, ["m"])], [("y", np.float32, None)])


def _start_and_join(threads, timeout: float = 120):
    """A deadlock fails the test instead of hanging the suite."""
    for t in threads:
        t.daemon = True
        t.start()
    for t in threads:
        t.join(timeout)
        assert not t.is_alive(), "a thread did not finish: deadlock?"


def _assert_child_succeeds(pid: int, hung: str, timeout: float = 120):
    """A forked child exits 0 within `timeout` s; killed and failed with `hung` otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail(hung)
        time.sleep(0.01)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status


def _run(e, rng, n: int, m: int):
    x = rng.standard_normal((1, n)).astype(np.float32)
    w = rng.standard_normal(m).astype(np.float32)
    np.testing.assert_array_equal(e.run({"x": x, "w": w})["y"].numpy(), x + w)


def test_a_decoder_runs_each_step_on_a_plan_built_ahead(device, rng):
    e = load_on(MERGED_DECODER, device)
    greedy_steps_against_onnxruntime(e, rng, steps=12)
    s = e.stats()
    # The prompt, the first step with a past and the next two are planned
    # on demand (three new shapes make a progression); every later step
    # finds its plan built (or being built) ahead.
    assert s["plans_ahead_used"] == 8, s
    assert s["plan_misses"] == 4, s
    assert e._core.options["plan_ahead"] is True


def test_plan_ahead_off_builds_on_demand_only(rng):
    e = load_on(MERGED_DECODER, "cpu", plan_ahead=False)
    greedy_steps_against_onnxruntime(e, rng, steps=8)
    s = e.stats()
    assert (s["plans_ahead"], s["plans_ahead_used"], s["plan_misses"]) == (0, 0, 8), s
    assert e._core.options["plan_ahead"] is False


def test_only_a_progression_is_guessed(rng):
    import twinfer

    e = twinfer.load(_add_model())
    for n in (3, 5, 6, 10, 4):  # steps 2, 1, 4, -6: never the same twice
        _run(e, rng, n, n)
    e._core._wait_plans_ahead()
    assert e.stats()["plans_ahead"] == 0
    for n in (7, 8, 9):  # +1, +1: 10 is cached already, nothing to build
        _run(e, rng, n, n)
    e._core._wait_plans_ahead()
    assert e.stats()["plans_ahead"] == 0
    for n in (12, 14, 16):  # +2, +2: 18 is built ahead, and used
        _run(e, rng, n, n)
    e._core._wait_plans_ahead()
    assert e.stats()["plans_ahead"] == 1
    misses = e.stats()["plan_misses"]
    _run(e, rng, 18, 18)
    s = e.stats()
    assert (s["plan_misses"], s["plans_ahead_used"]) == (misses, 1), s
    e._core._wait_plans_ahead()  # and 20 after it: the progression goes on
    assert e.stats()["plans_ahead"] == 2


def test_a_cache_of_one_plan_builds_nothing_ahead(rng):
    import twinfer

    e = twinfer.load(_add_model(), max_cached_plans=1)
    for n in (3, 4, 5, 6):
        _run(e, rng, n, n)
    e._core._wait_plans_ahead()
    assert e.stats()["plans_ahead"] == 0


def test_a_guess_no_plan_can_take_is_dropped(rng):
    import twinfer

    e = twinfer.load(_add_model())
    for n, m in ((1, 3), (2, 2), (3, 1)):  # (+1, -1) twice: the guess (4, 0) cannot broadcast
        _run(e, rng, n, m)
    e._core._wait_plans_ahead()
    assert e.stats()["plans_ahead"] == 0
    with pytest.raises(twinfer.ShapeError):  # the run that asks for it gets the error
        e.run({"x": np.zeros((1, 4), np.float32), "w": np.zeros(0, np.float32)})
    _run(e, rng, 5, 5)  # and the engine goes on


def test_threads_with_their_own_progressions(rng):
    import twinfer

    e = twinfer.load(_add_model(), max_cached_plans=4)
    errors = []

    def worker(seed, lengths):
        r = np.random.default_rng(seed)
        try:
            for n in lengths:
                _run(e, r, n, n if n % 3 else 1)
        except Exception as ex:  # noqa: BLE001 - reported below
            errors.append(ex)

    threads = [threading.Thread(target=worker, args=(k, range(2 + k, 60, 1 + k))) for k in range(4)]
    _start_and_join(threads)
    assert not errors, errors[:3]
    e._core._wait_plans_ahead()


def test_an_engine_dropped_while_it_builds_ahead(rng):
    import twinfer

    for _ in range(5):
        e = twinfer.load(MERGED_DECODER)
        greedy_steps_against_onnxruntime(e, rng, steps=4)  # the guess for step 5 may be building
        del e
        gc.collect()


def test_threads_that_want_one_new_plan_build_it_once(rng):
    import twinfer

    e = twinfer.load(_add_model(), plan_ahead=False)
    x = rng.standard_normal((1, 37)).astype(np.float32)
    w = rng.standard_normal(37).astype(np.float32)
    start, outs = threading.Barrier(8), []

    def worker():
        start.wait()
        outs.append(e.run({"x": x, "w": w})["y"].numpy())

    _start_and_join([threading.Thread(target=worker) for _ in range(8)])
    assert len(outs) == 8
    for y in outs:
        np.testing.assert_array_equal(y, x + w)
    s = e.stats()
    assert (s["plan_misses"], s["plan_hits"]) == (1, 7), s


def test_threads_build_plans_for_their_own_new_shapes_at_once(rng):
    import twinfer

    e = twinfer.load(_add_model(), plan_ahead=False, max_cached_plans=64)
    lengths = rng.permutation(np.arange(1, 49)).reshape(4, 12)  # each new, in no progression
    start, errors = threading.Barrier(4), []

    def worker(k):
        r = np.random.default_rng(k)
        start.wait()
        try:
            for n in lengths[k]:
                _run(e, r, int(n), int(n))
        except Exception as ex:  # noqa: BLE001 - reported below
            errors.append(ex)

    _start_and_join([threading.Thread(target=worker, args=(k,)) for k in range(4)])
    assert not errors, errors[:3]
    assert e.stats()["plan_misses"] == 48


def test_a_run_at_a_cached_shape_does_not_wait_for_another_threads_plan(rng, monkeypatch):
    import twinfer

    e = twinfer.load(_add_model(), plan_ahead=False)
    _run(e, rng, 5, 5)  # cached from now on
    monkeypatch.setenv("TWINFER_TEST_PLAN_DELAY_MS", "2000")  # every new plan from here takes 2 s
    builder = threading.Thread(target=_run, args=(e, np.random.default_rng(1), 9, 9), daemon=True)
    builder.start()
    deadline = time.monotonic() + 60
    while e.stats()["plans_building"] == 0:
        assert time.monotonic() < deadline, "the other thread's build never started"
        time.sleep(0.005)
    _run(e, rng, 5, 5)
    # The cached run came back while the other plan was still being built
    # (plans build outside the cache's lock).
    assert e.stats()["plans_building"] == 1
    builder.join(60)
    assert not builder.is_alive()
    assert e.stats()["plans_building"] == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX")
def test_a_forked_child_plans_and_builds_ahead(rng):
    # The parent's plan-ahead thread does not exist in a child: the child
    # must neither wait for it nor hang, and builds ahead with its own.
    import twinfer

    e = twinfer.load(_add_model())
    for n in (3, 4, 5):  # 6 is being built ahead, or is built
        _run(e, rng, n, n)
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 only if every answer is right
        code = 1
        try:
            r = np.random.default_rng(2)
            for n in (6, 7, 8, 9, 11, 13):
                _run(e, r, n, n)
            e._core._wait_plans_ahead()
            code = 0 if e.stats()["plans_ahead"] >= 1 else 2
        finally:
            os._exit(code)
    _assert_child_succeeds(pid, "the forked child hung")
    _run(e, rng, 7, 7)  # and the parent goes on


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX")
def test_a_fork_during_another_threads_build_leaves_the_child_free_to_build_it(rng, monkeypatch):
    # A thread of the parent is building the plan for n = 7 when the fork
    # comes: the child has no such thread, so its own run at n = 7 must
    # build the plan itself rather than wait for one no thread will finish.
    import threading

    import twinfer

    e = twinfer.load(_add_model(), plan_ahead=False)
    _run(e, rng, 3, 3)
    monkeypatch.setenv("TWINFER_TEST_PLAN_DELAY_MS", "1500")
    builder = threading.Thread(target=_run, args=(e, np.random.default_rng(1), 7, 7))
    builder.start()
    deadline = time.monotonic() + 60
    while e.stats()["plans_building"] == 0 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert e.stats()["plans_building"] == 1
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.environ.pop("TWINFER_TEST_PLAN_DELAY_MS", None)
            _run(e, np.random.default_rng(2), 7, 7)
            code = 0
        finally:
            os._exit(code)
    _assert_child_succeeds(pid, "the forked child waited for a build no thread of it runs", timeout=60)
    builder.join(60)
    _run(e, rng, 7, 7)
