"""twinfer.Batcher: merged batches, each caller's own slice (checked against
NumPy on fresh data), preferred sizes, shapes that cannot merge, timeouts,
bad requests, asyncio, draining, and instances on the simulated GPU."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest
from onnx import helper

import twinfer
from onnx_helpers import make_model
from twinfer.serve import BatcherClosed, QueueFull


def _matmul_engine(rng, device="cpu", k=5, n=3):
    w = rng.standard_normal((k, n)).astype(np.float32)
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", np.float32, ["N", k])],
                       [("y", np.float32, ["N", n])], [("w", w)])
    return twinfer.load(model.SerializeToString(), device=device), w


def _rowsum_engine(device="cpu"):
    """x [N, L] -> y [N, 1]: any L, so requests of different L cannot merge."""
    axes = np.array([1], np.int64)
    model = make_model([helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=1)],
                       [("x", np.float32, ["N", "L"])], [("y", np.float32, ["N", 1])], [("axes", axes)])
    return twinfer.load(model.SerializeToString(), device=device)


@pytest.mark.parametrize("device", ["cpu", "sim", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_threads_get_their_own_rows(device, rng):
    engine, w = _matmul_engine(rng, device)
    xs = [rng.standard_normal((int(rng.integers(1, 4)), 5)).astype(np.float32) for _ in range(40)]
    results = {}
    with twinfer.Batcher(engine, max_batch_size=8, max_queue_delay=0.02, instances=2) as batcher:
        def call(i):
            results[i] = batcher.run({"x": xs[i]})["y"]

        threads = [threading.Thread(target=call, args=(i,)) for i in range(len(xs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stats = batcher.stats()
    for i, x in enumerate(xs):
        np.testing.assert_allclose(results[i], x @ w, rtol=1e-5, atol=1e-5)
    assert stats["successes"] == len(xs) and stats["failures"] == 0
    assert stats["inferences"] == sum(len(x) for x in xs)
    assert stats["batches"] < len(xs), stats  # 40 threads at once: some requests merged
    assert max(stats["batch_sizes"]) <= 8


def test_full_batch_goes_at_once(rng):
    engine, w = _matmul_engine(rng)
    xs = [rng.standard_normal((1, 5)).astype(np.float32) for _ in range(8)]
    with twinfer.Batcher(engine, max_batch_size=8, max_queue_delay=30.0) as batcher:
        start = time.monotonic()
        futures = [batcher.submit({"x": x}) for x in xs]
        outs = [f.result(timeout=10) for f in futures]
        assert time.monotonic() - start < 10  # full: did not wait for the 30 s delay
        assert batcher.stats()["batch_sizes"] == {8: 1}
    for x, out in zip(xs, outs):
        np.testing.assert_allclose(out["y"], x @ w, rtol=1e-5, atol=1e-5)


def test_preferred_batch_size_first(rng):
    engine, w = _matmul_engine(rng)
    xs = [rng.standard_normal((1, 5)).astype(np.float32) for _ in range(6)]
    with twinfer.Batcher(engine, max_batch_size=8, max_queue_delay=1.0, preferred_batch_sizes=[4]) as batcher:
        futures = [batcher.submit({"x": x}) for x in xs]
        outs = [f.result(timeout=10) for f in futures]
        # Four as soon as they are there, the other two after the delay.
        assert batcher.stats()["batch_sizes"] == {2: 1, 4: 1}
    for x, out in zip(xs, outs):
        np.testing.assert_allclose(out["y"], x @ w, rtol=1e-5, atol=1e-5)


def test_different_shapes_batch_apart():
    engine = _rowsum_engine()
    rng = np.random.default_rng()
    xs = [rng.standard_normal((1, 3 if i % 2 else 7)).astype(np.float32) for i in range(8)]
    with twinfer.Batcher(engine, max_batch_size=4, max_queue_delay=30.0) as batcher:
        futures = [batcher.submit({"x": x}) for x in xs]
        outs = [f.result(timeout=10)["y"] for f in futures]
        assert batcher.stats()["batch_sizes"] == {4: 2}
    for x, y in zip(xs, outs):
        np.testing.assert_allclose(y, x.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-5)


def test_timeout_in_the_queue(rng):
    engine, _ = _matmul_engine(rng)
    batcher = twinfer.Batcher(engine, max_batch_size=8, max_queue_delay=30.0)
    try:
        future = batcher.submit({"x": np.zeros((1, 5), np.float32)}, timeout=0.05)
        with pytest.raises(TimeoutError, match="longer than its timeout"):
            future.result(timeout=10)
        assert batcher.stats()["timeouts"] == 1
    finally:
        batcher.close(drain=False)


def test_bad_requests_raise_at_submit(rng):
    engine, _ = _matmul_engine(rng)
    with twinfer.Batcher(engine, max_batch_size=4) as batcher:
        with pytest.raises(twinfer.DTypeError, match="'x' is float64"):
            batcher.submit({"x": np.zeros((1, 5))})
        with pytest.raises(twinfer.ShapeError, match=r"shape \[1, 6\]"):
            batcher.submit({"x": np.zeros((1, 6), np.float32)})
        with pytest.raises(twinfer.ShapeError, match="batch dim 5 is outside 1..max_batch_size"):
            batcher.submit({"x": np.zeros((5, 5), np.float32)})
        with pytest.raises(twinfer.InvalidArgumentError, match=r"unknown input\(s\) \['z'\]"):
            batcher.submit({"z": np.zeros((1, 5), np.float32)})
        assert batcher.stats()["requests"] == 0


def test_a_failing_request_fails_alone():
    data = np.arange(12, dtype=np.float32).reshape(6, 2)
    model = make_model([helper.make_node("Gather", ["data", "idx"], ["y"], axis=0)], [("idx", np.int64, ["N"])],
                       [("y", np.float32, ["N", 2])], [("data", data)])
    engine = twinfer.load(model.SerializeToString(), device="cpu")
    with twinfer.Batcher(engine, max_batch_size=3, max_queue_delay=30.0) as batcher:
        good1 = batcher.submit({"idx": np.array([1], np.int64)})
        bad = batcher.submit({"idx": np.array([60], np.int64)})
        good2 = batcher.submit({"idx": np.array([5], np.int64)})
        np.testing.assert_array_equal(good1.result(timeout=10)["y"], data[[1]])
        np.testing.assert_array_equal(good2.result(timeout=10)["y"], data[[5]])
        with pytest.raises(twinfer.InvalidArgumentError, match="out of range"):
            bad.result(timeout=10)


def test_asyncio_tasks(rng):
    engine, w = _matmul_engine(rng)
    xs = [rng.standard_normal((2, 5)).astype(np.float32) for _ in range(16)]

    async def main(batcher):
        return await asyncio.gather(*(batcher.run_async({"x": x}) for x in xs))

    with twinfer.Batcher(engine, max_batch_size=8, max_queue_delay=0.05) as batcher:
        outs = asyncio.run(main(batcher))
        assert max(batcher.stats()["batch_sizes"]) > 2
    for x, out in zip(xs, outs):
        np.testing.assert_allclose(out["y"], x @ w, rtol=1e-5, atol=1e-5)


def test_close_drains_then_refuses(rng):
    engine, w = _matmul_engine(rng)
    batcher = twinfer.Batcher(engine, max_batch_size=8, max_queue_delay=30.0)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    future = batcher.submit({"x": x})
    batcher.close(drain=True)  # does not wait the 30 s: closing sends what is queued
    np.testing.assert_allclose(future.result(timeout=0)["y"], x @ w, rtol=1e-5, atol=1e-5)
    with pytest.raises(BatcherClosed):
        batcher.submit({"x": x})


def test_close_lets_the_engines_go(rng):
    # close() kept the engines and contexts of a closed Batcher (on a GPU its
    # device memory) for as long as anything held the Batcher. The request
    # queued at close still gets its answer first.
    import gc
    import weakref

    engine, w = _matmul_engine(rng)
    gone = weakref.ref(engine)
    batcher = twinfer.Batcher(engine, max_batch_size=8, max_queue_delay=30.0, instances=2)
    del engine
    x = rng.standard_normal((3, 5)).astype(np.float32)
    gc.collect()
    gc.disable()
    try:
        future = batcher.submit({"x": x})
        batcher.close(drain=True)
        np.testing.assert_allclose(future.result(timeout=0)["y"], x @ w, rtol=1e-5, atol=1e-5)
        assert gone() is None
        with pytest.raises(BatcherClosed):  # still refuses, without its engines
            batcher.submit({"x": x})
    finally:
        gc.enable()


def test_queue_limit(rng):
    engine, _ = _matmul_engine(rng)
    batcher = twinfer.Batcher(engine, max_batch_size=8, max_queue_delay=30.0, max_queue_size=2)
    try:
        batcher.submit({"x": np.zeros((1, 5), np.float32)})
        batcher.submit({"x": np.zeros((1, 5), np.float32)})
        with pytest.raises(QueueFull):
            batcher.submit({"x": np.zeros((1, 5), np.float32)})
    finally:
        batcher.close(drain=False)


def test_unbatched_model_needs_max_batch_size_0(rng):
    w = rng.standard_normal((5, 3)).astype(np.float32)
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", np.float32, [2, 5])],
                       [("y", np.float32, [2, 3])], [("w", w)])
    engine = twinfer.load(model.SerializeToString(), device="cpu")
    with pytest.raises(twinfer.InvalidArgumentError, match="needs a batch dim first"):
        twinfer.Batcher(engine, max_batch_size=4)
    x = rng.standard_normal((2, 5)).astype(np.float32)
    with twinfer.Batcher(engine, max_batch_size=0, instances=2) as batcher:
        futures = [batcher.submit({"x": x}) for _ in range(4)]
        for f in futures:
            np.testing.assert_allclose(f.result(timeout=10)["y"], x @ w, rtol=1e-5, atol=1e-5)
        assert batcher.stats()["batch_sizes"] == {1: 4}


def test_gpu_and_cpu_instances_together(rng):
    """One engine on the simulated GPU, one on the CPU, two instances each."""
    w = rng.standard_normal((5, 3)).astype(np.float32)
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", np.float32, ["N", 5])],
                       [("y", np.float32, ["N", 3])], [("w", w)]).SerializeToString()
    engines = [twinfer.load(model, device="sim"), twinfer.load(model, device="cpu")]
    xs = [rng.standard_normal((2, 5)).astype(np.float32) for _ in range(24)]
    with twinfer.Batcher(engines, max_batch_size=4, instances=2) as batcher:
        assert batcher.instances == 4 and [e.device for e in batcher.instance_engines].count("cpu") == 2
        futures = [batcher.submit({"x": x}) for x in xs]
        for x, f in zip(xs, futures):
            np.testing.assert_allclose(f.result(timeout=30)["y"], x @ w, rtol=1e-5, atol=1e-5)


def test_a_batcher_dropped_without_close_lets_its_workers_go(rng):
    # Workers hold their Batcher weakly and let go of it while idle: one
    # dropped without close() is collected, and its threads (and contexts)
    # go with it. Before, each leaked its workers for the process's life.
    import gc

    e, _ = _matmul_engine(rng)

    def workers():
        return [t for t in threading.enumerate() if t.name.startswith("twinfer-batcher-leak")]

    for k in range(6):
        b = twinfer.Batcher(e, max_batch_size=4, instances=2, name=f"leak{k}")
        b.run({"x": rng.standard_normal((2, 5)).astype(np.float32)})
        del b
    gc.collect()
    deadline = time.monotonic() + 30
    while workers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not workers(), workers()


def test_a_cancel_racing_a_queue_timeout_does_not_end_the_worker(rng):
    # A caller's cancel() landing between the worker's "cancelled?" check and
    # its set_exception(TimeoutError) made set_exception raise, which ended
    # the worker: the model never answered again. The race is made certain
    # here: the future is cancelled but answers "not cancelled" once.
    engine, w = _matmul_engine(rng)
    with twinfer.Batcher(engine, max_batch_size=2, max_queue_delay=0.5) as batcher:
        f = batcher.submit({"x": rng.standard_normal((1, 5)).astype(np.float32)}, timeout=0.1)
        assert f.cancel()
        f.cancelled = lambda: False  # what the worker saw just before the cancel
        time.sleep(0.3)  # past the deadline: the worker drops it
        xs = [rng.standard_normal((1, 5)).astype(np.float32) for _ in range(2)]
        later = [batcher.submit({"x": x}) for x in xs]  # a full batch: sent at once
        for x, g in zip(xs, later):
            np.testing.assert_allclose(g.result(timeout=10)["y"], x @ w, rtol=1e-5, atol=1e-5)


def test_a_queue_delay_of_years_is_waited_not_fatal(rng):
    # Triton's max_queue_delay_microseconds is a uint64: 2**64 - 1 us is past
    # what a thread's wait takes (OverflowError ended the worker on the first
    # request). The wait is capped; a full batch still goes at once.
    engine, w = _matmul_engine(rng)
    with twinfer.Batcher(engine, max_batch_size=2, max_queue_delay=(2**64 - 1) / 1e6) as batcher:
        xs = [rng.standard_normal((1, 5)).astype(np.float32) for _ in range(2)]
        first = batcher.submit({"x": xs[0]})
        time.sleep(0.2)  # the worker waits for company
        second = batcher.submit({"x": xs[1]})
        for x, g in zip(xs, (first, second)):
            np.testing.assert_allclose(g.result(timeout=10)["y"], x @ w, rtol=1e-5, atol=1e-5)
