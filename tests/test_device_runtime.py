"""The GPU runtime on the simulated device (every CI run) and on CUDA (where
a GPU is present): graphs replayed with changing data, addresses and shapes,
streams and events between engines, the DLPack stream protocol, threads,
running out of device memory, placement with copies, the host fallback.
References: NumPy (device_models) and twinfer's CPU backend."""

import gc
import threading
import warnings

import numpy as np
import pytest
from conftest import rel_err
from device_models import (ForeignArray, NewShapes, chain_model, chain_ref, mixed_model, mixed_ref, nonzero_model,
                           nonzero_ref, warm_context)

import twinfer
from twinfer.testing import sim_options

DEVICES = ["sim", pytest.param("cuda", marks=pytest.mark.cuda)]


@pytest.fixture(params=DEVICES)
def gpu(request):
    return request.param


def test_numpy_in_numpy_out(gpu, rng):
    e = twinfer.load(chain_model(), device=gpu)
    x = rng.standard_normal((3, 33)).astype(np.float32)
    y = e.run({"x": x})["y"]
    assert y.device == "cpu"  # host arrays in: host tensors out, the run waited for
    assert rel_err(y.numpy(), chain_ref(x)) < 1e-6
    assert rel_err(e(x).numpy(), chain_ref(x)) < 1e-6


def test_device_outputs_carry_a_ready_event(gpu, rng):
    e = twinfer.load(chain_model(), device=gpu)
    x = rng.standard_normal((257, 33)).astype(np.float32)
    y = e.run({"x": x}, outputs="device")["y"]
    assert y.device.split(":")[0] == gpu
    y.synchronize()
    assert y.ready
    assert rel_err(y.numpy(), chain_ref(x)) < 1e-6
    assert rel_err(y.cpu().numpy(), chain_ref(x)) < 1e-6


def test_graph_replay_with_new_data_every_run(gpu, rng):
    e = twinfer.load(chain_model(), device=gpu)
    ctx = e.create_context()
    for _ in range(6):
        x = rng.standard_normal((31, 33)).astype(np.float32)
        assert rel_err(e.run({"x": x}, context=ctx)["y"].numpy(), chain_ref(x)) < 1e-6
    stats = ctx.graph_stats()
    assert stats["captures"] == 1 and stats["replays"] == 4, stats


def test_graph_replay_with_new_input_addresses(gpu, rng):
    # Device inputs at a different address every run (outputs of another
    # engine): the graph reads its own input buffers, refreshed each time.
    producer = twinfer.load(chain_model(2), device=gpu)
    e = twinfer.load(chain_model(), device=gpu)
    ctx = e.create_context()
    addresses = set()
    for _ in range(5):
        x = rng.standard_normal((8, 33)).astype(np.float32)
        mid = producer.run({"x": x}, outputs="device")["y"]
        addresses.add(mid.data_ptr)
        got = e.run({"x": mid}, context=ctx, outputs="device")["y"]
        assert rel_err(got.numpy(), chain_ref(chain_ref(x, 2))) < 1e-6
        del mid
    assert ctx.graph_stats()["replays"] >= 3


def test_graph_per_input_shape(gpu, rng):
    e = twinfer.load(chain_model(), device=gpu)
    ctx = e.create_context()
    # Largest first: a larger arena later moves every buffer, and graphs
    # captured before then are dropped (the next runs capture again).
    for n in (9, 4, 9, 4, 9, 4, 9, 4):
        x = rng.standard_normal((n, 33)).astype(np.float32)
        assert rel_err(e.run({"x": x}, context=ctx)["y"].numpy(), chain_ref(x)) < 1e-6
    stats = ctx.graph_stats()
    assert stats["captures"] == 2 and stats["replays"] == 4 and stats["cached"] == 2, stats
    x = rng.standard_normal((50, 33)).astype(np.float32)  # a bigger arena: no stale graph survives
    for _ in range(3):
        assert rel_err(e.run({"x": x}, context=ctx)["y"].numpy(), chain_ref(x)) < 1e-6
    x = rng.standard_normal((4, 33)).astype(np.float32)
    for _ in range(3):
        assert rel_err(e.run({"x": x}, context=ctx)["y"].numpy(), chain_ref(x)) < 1e-6


def test_cuda_graphs_off(gpu, rng):
    e = twinfer.load(chain_model(), device=gpu, cuda_graphs=False)
    ctx = e.create_context()
    for _ in range(4):
        x = rng.standard_normal((5, 33)).astype(np.float32)
        assert rel_err(e.run({"x": x}, context=ctx)["y"].numpy(), chain_ref(x)) < 1e-6
    assert ctx.graph_stats() == {"captures": 0, "replays": 0, "cached": 0, "kept_for_callers": 0}


def test_capture_while_another_thread_runs(gpu, rng):
    busy = twinfer.load(chain_model(8), device=gpu)
    fresh = twinfer.load(chain_model(), device=gpu)
    xs = [rng.standard_normal((64, 33)).astype(np.float32) for _ in range(8)]
    stop = threading.Event()
    errors = []

    def hammer():
        ctx = busy.create_context()
        i = 0
        while not stop.is_set():
            x = xs[i % len(xs)]
            if rel_err(busy.run({"x": x}, context=ctx)["y"].numpy(), chain_ref(x, 8)) > 1e-6:
                errors.append(i)
            i += 1

    t = threading.Thread(target=hammer)
    t.start()
    try:
        ctx = fresh.create_context()
        for x in xs:  # the second run captures while `hammer` is running
            assert rel_err(fresh.run({"x": x}, context=ctx)["y"].numpy(), chain_ref(x)) < 1e-6
        assert ctx.graph_stats()["captures"] == 1
    finally:
        stop.set()
        t.join()
    assert not errors


def test_eight_threads_on_one_engine(gpu, rng):
    e = twinfer.load(chain_model(), device=gpu)
    inputs = [rng.standard_normal((1 + i % 5, 33)).astype(np.float32) for i in range(32)]
    results = [None] * len(inputs)

    def work(k):
        for i in range(k, len(inputs), 8):
            results[i] = e.run({"x": inputs[i]})["y"].numpy()

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for x, y in zip(inputs, results):
        assert rel_err(y, chain_ref(x)) < 1e-6


def test_stream_order_between_engines_without_sync(gpu, rng):
    a = twinfer.load(chain_model(), device=gpu)
    b = twinfer.load(chain_model(3), device=gpu)
    ca, cb = a.create_context(), b.create_context()
    for _ in range(4):
        x = rng.standard_normal((128, 33)).astype(np.float32)
        y = a.run({"x": x}, context=ca, outputs="device")["y"]       # stream of ca
        z = b.run({"x": y}, context=cb, outputs="device")["y"]       # stream of cb, waits for y's event
        assert rel_err(z.numpy(), chain_ref(chain_ref(x), 3)) < 1e-6


def test_run_on_a_callers_stream(gpu, rng):
    s = twinfer.create_stream(gpu, priority=0)
    a = twinfer.load(chain_model(), device=gpu)
    b = twinfer.load(chain_model(3), device=gpu)
    x = rng.standard_normal((17, 33)).astype(np.float32)
    y = a.run({"x": x}, stream=s, outputs="device")["y"]
    z = b.run({"x": y}, stream=s, outputs="device")["y"]  # same stream: ordered by it
    assert rel_err(z.numpy(), chain_ref(chain_ref(x), 3)) < 1e-6
    z2 = b.run({"x": y}, stream=s.handle, outputs="host")["y"]  # an int handle works too
    assert rel_err(z2.numpy(), chain_ref(chain_ref(x), 3)) < 1e-6


def test_dlpack_stream_protocol(gpu, rng):
    a = twinfer.load(chain_model(), device=gpu)
    b = twinfer.load(chain_model(3), device=gpu)
    cb = b.create_context()
    x = rng.standard_normal((96, 33)).astype(np.float32)
    y = a.run({"x": x}, outputs="device")["y"]
    # The consumer names its stream; the producer makes that stream wait.
    imported = twinfer._core.Tensor._from_capsule(y.__dlpack__(stream=cb.stream.handle))
    assert imported.data_ptr == y.data_ptr
    z = b.run({"x": imported}, context=cb, outputs="host")["y"]
    assert rel_err(z.numpy(), chain_ref(chain_ref(x), 3)) < 1e-6
    # The consumer's context goes first; the import, released after it, records
    # its last use on that context's stream, which it keeps alive (on a GPU a
    # borrowed handle of the destroyed stream crashed the driver).
    del cb
    del imported
    assert rel_err(y.numpy(), chain_ref(x)) < 1e-6


def test_priorities(gpu):
    least, greatest = twinfer.stream_priority_range(gpu)
    assert greatest <= least
    e = twinfer.load(chain_model(), device=gpu, stream_priority=greatest)
    assert e.create_context().stream.priority == greatest
    assert e.create_context(priority=least).stream.priority == least
    assert twinfer.create_stream(gpu, priority=greatest - 100).priority == greatest  # clamped


def test_placement_puts_copies_around_host_nodes(gpu, rng):
    e = twinfer.load(mixed_model(), device=gpu)
    rows = e.kernel_report({"x": (6, 33), "flag": ()})
    where = {r.node: r.backend for r in rows}
    assert where["sin"] == gpu and where["cos"] == gpu
    assert where["branch"] == "cpu"
    assert [r.note for r in rows if r.node == "branch"] == ["control flow runs on the host"]
    copies = [r for r in rows if r.backend == "copy"]
    # sin's output and the flag go to the host for If; If's output comes back.
    assert sorted(r.op for r in copies) == ["com.twinfer::MemcpyToDevice", "com.twinfer::MemcpyToHost",
                                             "com.twinfer::MemcpyToHost"]
    report = e.memory_report({"x": (6, 33), "flag": ()})
    assert report["host_steps"] == 1 and report["copy_steps"] == 3 and report["device_arena_bytes"] > 0
    for flag in (True, False, True):
        x = rng.standard_normal((6, 33)).astype(np.float32)
        assert rel_err(e.run({"x": x, "flag": np.array(flag)})["y"].numpy(), mixed_ref(x, flag)) < 1e-6


def test_allow_cpu_fallback_false_lists_the_nodes(gpu):
    with pytest.raises(twinfer.UnsupportedOpError, match="'branch' \\(If\\)"):
        twinfer.load(mixed_model(), device=gpu, allow_cpu_fallback=False)
    twinfer.load(chain_model(), device=gpu, allow_cpu_fallback=False)  # every node has a kernel


def test_value_dependent_shapes_run_on_the_host_with_a_warning(gpu, rng, monkeypatch):
    # NonZero runs on the device by default (tests/test_staged_tail.py); with
    # staging off, the host evaluator's tail and its warning.
    monkeypatch.setenv("TWINFER_STAGED_TAIL", "0")
    e = twinfer.load(nonzero_model(), device=gpu)
    x = rng.standard_normal(37).astype(np.float32)
    with pytest.warns(RuntimeWarning, match="CPU evaluator"):
        y = e.run({"x": x})["y"]
    np.testing.assert_array_equal(y.numpy(), nonzero_ref(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per engine
        x = rng.standard_normal(11).astype(np.float32)
        np.testing.assert_array_equal(e.run({"x": x}, outputs="device")["y"].numpy(), nonzero_ref(x))


def test_value_dependent_shapes_run_on_the_device_without_a_warning(gpu, rng):
    e = twinfer.load(nonzero_model(), device=gpu)
    for n in (37, 11):
        x = rng.standard_normal(n).astype(np.float32)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            y = e.run({"x": x}, outputs="device")["y"]
        assert y.device != "cpu"
        np.testing.assert_array_equal(y.numpy(), nonzero_ref(x))


def test_weights_upload_once_and_are_shared_by_plans(gpu, rng):
    from onnx import TensorProto, helper, numpy_helper

    w = rng.standard_normal((33,)).astype(np.float32)
    g = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 33])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 33])],
                          [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    e = twinfer.load(m, device=gpu)
    r1 = e.memory_report({"x": (2, 33)})
    r2 = e.memory_report({"x": (7, 33)})
    assert r1["device_constant_bytes"] == r2["device_constant_bytes"] == w.nbytes
    for n in (2, 7):
        x = rng.standard_normal((n, 33)).astype(np.float32)
        assert rel_err(e.run({"x": x})["y"].numpy(), x * w) < 1e-6


def test_out_of_memory_leaves_the_engine_usable(gpu, rng):
    from onnx import TensorProto, helper, numpy_helper

    # y = each row of x broadcast over 2^20 columns, summed over the trailing
    # axis (a reduction CUDA has a kernel for, so the intermediate is the
    # device's): 2^20 * N floats, which no device holds for N = 2^18 (1 TiB).
    g = helper.make_graph([helper.make_node("Expand", ["x", "cols"], ["big"]),
                           helper.make_node("ReduceSum", ["big", "axis"], ["y"], keepdims=0)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N"])],
                          [numpy_helper.from_array(np.array([1, 1 << 20], np.int64), "cols"),
                           numpy_helper.from_array(np.array([1], np.int64), "axis")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    # On the simulated device, placed as CUDA places it where the build can say.
    as_cuda = gpu == "sim" and twinfer.build_info()["cuda_compiled"]
    e = twinfer.load(m, device=gpu, **({"sim_coverage": "cuda"} if as_cuda else {}))
    assert all(r.backend == gpu for r in e.kernel_report({"x": (3, 1)})), e.kernel_report({"x": (3, 1)})
    with sim_options(memory_limit=(1 << 30) if gpu == "sim" else 0):
        with pytest.raises(twinfer.OutOfMemoryError, match="out of memory on " + gpu):
            e.run({"x": np.ones((1 << 18, 1), np.float32)})
        x = rng.standard_normal((5, 1)).astype(np.float32)
        assert rel_err(e.run({"x": x})["y"].numpy(), x[:, 0] * (1 << 20)) < 1e-5


@pytest.mark.cuda_build
def test_saved_engine_records_the_backend(tmp_path, rng):
    e = twinfer.load(chain_model(), device="sim", sim_coverage="cuda")
    path = tmp_path / "chain.twinfer"
    e.save(path)
    with pytest.warns(RuntimeWarning, match="optimised for the cuda backend"):
        again = twinfer.load(path, device="cpu")
    x = rng.standard_normal((3, 33)).astype(np.float32)
    assert rel_err(again.run({"x": x})["y"].numpy(), chain_ref(x)) < 1e-6


def test_an_output_listed_twice(gpu, rng):
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5]),
                           helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    e = twinfer.load(m, device=gpu)
    for outputs in ("host", "device", "device", "device"):  # eager, capture, replays
        x = rng.standard_normal((3, 5)).astype(np.float32)
        ys = e._core.run([twinfer.as_tensor(x)], None, outputs == "host")
        assert len(ys) == 2
        for y in ys:
            np.testing.assert_array_equal(y.numpy(), np.maximum(x, 0))


def test_profiling_times_every_step_once(gpu, rng, monkeypatch):
    # Seven steps to count: the chain's six ops unfused (fused, they are one
    # step; tests/test_fuse_elementwise.py).
    monkeypatch.setenv("TWINFER_FUSE_ELEMENTWISE", "0")
    e = twinfer.load(chain_model(), device=gpu)
    prof = e.profile_ops({"x": rng.standard_normal((9, 33)).astype(np.float32)}, iterations=3, warmup=1)
    assert len(prof.steps) == 7 and all(s.ms_per_run > 0 for s in prof.steps)
    ctx = e.create_context()
    ctx.profiling = True
    for _ in range(3):
        e.run({"x": rng.standard_normal((9, 33)).astype(np.float32)}, context=ctx)
    assert {t[4] for t in ctx.step_times()} == {3}  # runs counted once per step


def test_onnx_backend_on_the_device(gpu, rng):
    import twinfer.backend as backend

    assert backend.supports_device(gpu.upper())
    rep = backend.prepare(chain_model(), gpu.upper())
    assert rep.engine.device.startswith(gpu)
    x = rng.standard_normal((4, 33)).astype(np.float32)
    (y,) = rep.run([x])
    assert rel_err(y, chain_ref(x)) < 1e-6


def _captured_run(e, ctx, x_dev, s):
    """The graph of one run of `e` in `ctx` on `x_dev`, captured on stream
    `s`, and that run's output (written by each launch)."""
    s.begin_capture()
    try:
        y = e.run({"x": x_dev}, context=ctx, stream=s, outputs="device")["y"]
    finally:
        graph = s.end_capture()
    return graph, y


def test_runs_inside_a_callers_graph_capture(gpu, rng):
    x = rng.standard_normal((12, 33)).astype(np.float32)
    e, ctx, x_dev, _ = warm_context(gpu, x)
    s = twinfer.create_stream(gpu)
    s.begin_capture()
    try:
        y = e.run({"x": x_dev}, context=ctx, stream=s, outputs="device")["y"]
        with pytest.raises(twinfer.InvalidArgumentError, match="host memory"):
            e.run({"x": x}, context=ctx, stream=s, outputs="device")
    finally:
        graph = s.end_capture()
    assert graph.num_nodes > 0
    for _ in range(2):
        graph.launch(s)
        s.synchronize()
        assert rel_err(y.numpy(), chain_ref(chain_ref(x, 2))) < 1e-6


def test_a_capture_never_builds_a_plan(gpu, rng):
    # Building allocates, uploads and synchronises, none of which a thread
    # may do while it captures (on a GPU the first such call breaks the
    # caller's capture): a capture at shapes no run has planned is refused
    # with what to do, the capture itself goes on, and an eager run at those
    # shapes then plans them.
    x = rng.standard_normal((12, 33)).astype(np.float32)
    e, ctx, x_dev, want = warm_context(gpu, x)
    new = twinfer.load(chain_model(2), device=gpu).run({"x": x[:5]}, outputs="device")["y"]  # new shape
    misses = e.stats()["plan_misses"]
    s = twinfer.create_stream(gpu)
    s.begin_capture()
    try:
        with pytest.raises(twinfer.InvalidArgumentError, match="cannot build a plan"):
            e.run({"x": new}, context=ctx, stream=s, outputs="device")
        y = e.run({"x": x_dev}, context=ctx, stream=s, outputs="device")["y"]
    finally:
        graph = s.end_capture()
    assert e.stats()["plan_misses"] == misses
    graph.launch(s)
    s.synchronize()
    assert rel_err(y.numpy(), want) < 1e-6
    assert rel_err(e.run({"x": new}, context=ctx)["y"].numpy(), chain_ref(chain_ref(x[:5], 2))) < 1e-6


def test_one_context_captured_into_two_graphs_in_a_row(gpu, rng):
    # The context's last run was recorded inside the first capture: the
    # second capture must not wait on that event (an ended capture's; CUDA:
    # cudaErrorCapturedEvent), it is ordered by the first graph's launches.
    e, ctx, x_dev, want = warm_context(gpu, rng.standard_normal((12, 33)).astype(np.float32))
    s = twinfer.create_stream(gpu)
    captured = [_captured_run(e, ctx, x_dev, s) for _ in range(2)]
    for g, y in captured:
        g.launch(s)
        s.synchronize()
        assert rel_err(y.numpy(), want) < 1e-6


def test_a_callers_graph_outlives_its_plan_in_the_cache(gpu, rng):
    # The plan a caller's graph was captured with leaves the plan cache (one
    # plan kept, another shape run): the graph still launches its kernels,
    # which the context holds for it (before: freed, a crash on replay).
    e, ctx, x_dev, want = warm_context(gpu, rng.standard_normal((12, 33)).astype(np.float32), max_cached_plans=1,
                                       cuda_graphs=False)
    s = twinfer.create_stream(gpu)
    graph, y = _captured_run(e, ctx, x_dev, s)
    for n in (3, 40):  # other shapes: the captured plan is evicted, the arena grows
        z = rng.standard_normal((n, 33)).astype(np.float32)
        assert rel_err(e.run({"x": z}, context=ctx)["y"].numpy(), chain_ref(z)) < 1e-6
    assert e.stats()["plans_cached"] == 1
    gc.collect()
    for _ in range(2):
        graph.launch(s)
        s.synchronize()
        assert rel_err(y.numpy(), want) < 1e-6


def test_a_graphed_group_replays_after_its_plans_leave_the_cache(gpu, rng):
    e = twinfer.load(chain_model(), device=gpu, max_cached_plans=1)
    g = twinfer.Parallel([e]).graphed()
    for n in (5, 9, 5, 9, 5):  # 5 and 9 captured once each, then replayed; one plan cached at a time
        x = rng.standard_normal((n, 33)).astype(np.float32)
        (got,) = g.run([{"x": x}])
        assert rel_err(got["y"].numpy(), chain_ref(x)) < 1e-6
    st = g.stats()
    assert st["captures"] == 2 and st["replays"] == 3, st


def test_a_foreign_device_array_without_a_stream_runs_on_the_default_stream(gpu, rng):
    # Neither torch nor CuPy, no stream=: DLPack's producer is told the
    # legacy default stream, and the run goes there (the simulated device
    # has one for handles 1 and 2, as CUDA does).
    producer = twinfer.load(chain_model(2), device=gpu)
    e = twinfer.load(chain_model(), device=gpu)
    x = rng.standard_normal((7, 33)).astype(np.float32)
    y_dev = producer.run({"x": x}, outputs="device")["y"]
    y_dev.synchronize()
    got = e.run({"x": ForeignArray(y_dev)})["y"]
    assert rel_err(got.numpy(), chain_ref(chain_ref(x, 2))) < 1e-6


def test_captures_on_one_thread_while_another_builds_plans(gpu, rng):
    # A thread capturing and replaying (a graphed group, the caller's own
    # capture) while another thread builds plans for new shapes of the same
    # engine and of another, on demand and ahead: every capture completes,
    # every answer is right. On a GPU the builds run in relaxed capture mode
    # and take the lock captures begin and end under for their library
    # trials; the simulated device refuses allocations on a capturing thread.
    x = rng.standard_normal((12, 33)).astype(np.float32)
    e, ctx, x_dev, want = warm_context(gpu, x)
    other = twinfer.load(chain_model(2), device=gpu)
    group = twinfer.Parallel([e]).graphed()
    with NewShapes([(e, 6), (other, 2)]):
        for i in range(12):
            xi = x + i
            (got,) = group.run([{"x": xi}])
            assert rel_err(got["y"].numpy(), chain_ref(xi)) < 1e-6
            s = twinfer.create_stream(gpu)
            graph, y = _captured_run(e, ctx, x_dev, s)
            graph.launch(s)
            s.synchronize()
            assert rel_err(y.numpy(), want) < 1e-6
    assert group.stats()["replays"] >= 10


def test_a_pooled_run_captured_by_the_caller_keeps_its_buffers(gpu, rng):
    # engine.run without a context (a pooled one, as the torch drop-in runs)
    # captured into the caller's graph: the graph's outputs are views of that
    # context's buffers, so later eager runs must not get the same context.
    producer = twinfer.load(chain_model(2), device=gpu)
    e = twinfer.load(chain_model(), device=gpu)
    x = rng.standard_normal((12, 33)).astype(np.float32)
    x_dev = producer.run({"x": x}, outputs="device")["y"]
    s = twinfer.create_stream(gpu)
    e.run({"x": x_dev}, stream=s, outputs="device")["y"].synchronize()  # warm-up: a pooled context set up
    s.begin_capture()
    try:
        y = e.run({"x": x_dev}, stream=s, outputs="device")["y"]
    finally:
        graph = s.end_capture()
    graph.launch(s)
    s.synchronize()
    want = chain_ref(chain_ref(x, 2))
    other = rng.standard_normal((12, 33)).astype(np.float32)
    for _ in range(3):  # eager runs meanwhile: other contexts, other buffers
        np.testing.assert_allclose(e.run({"x": other})["y"].numpy(), chain_ref(other), rtol=1e-5, atol=1e-5)
    assert rel_err(y.numpy(), want) < 1e-6


# Tolerances from rounding to the type after every op, emulated in NumPy over
# 5,000 seeds: fp16's worst 2.5e-3 (p99 1.7e-3), bf16's 1.8e-2 (p99 1.35e-2).
@pytest.mark.parametrize("precision,tol", [("fp16", 4e-3), ("bf16", 3e-2), ("tf32", 2e-3)])
def test_lower_precisions_keep_the_models_dtypes(gpu, rng, precision, tol):
    from onnx import TensorProto, helper, numpy_helper

    # MatMul -> Add -> Gelu -> LayerNorm -> Softmax: GEMM, elementwise and row kernels.
    K, N = 48, 40
    w = (rng.standard_normal((K, N)) / np.sqrt(K)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["h2"]),
             helper.make_node("Gelu", ["h2"], ["g"]),
             helper.make_node("LayerNormalization", ["g", "s", "b"], ["n"], axis=-1),
             helper.make_node("Softmax", ["n"], ["y"], axis=-1)]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(rng.standard_normal(N).astype(np.float32), "b"),
             numpy_helper.from_array(rng.standard_normal(N).astype(np.float32), "s")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", K])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", N])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    x = rng.standard_normal((7, K)).astype(np.float32)
    want = twinfer.load(m, device="cpu").run({"x": x})["y"].numpy()
    e = twinfer.load(m, device=gpu, precision=precision)
    assert e.precision == precision
    for _ in range(3):
        y = e.run({"x": x})["y"]
        assert y.dtype == "float32"  # the model's inputs and outputs keep their dtypes
        assert rel_err(y.numpy(), want) < tol
    if precision != "tf32":
        ops = [r.op for r in e.kernel_report({"x": (7, K)})]
        # The input saturated (Clip: a finfo.min stays finite) and cast down,
        # the output cast back up.
        assert ops[:2] == ["Clip", "Cast"] and ops[-1] == "Cast", ops
        # Every node has a 16-bit kernel, on CUDA and on the CPU the simulated device runs.
        assert ops.count("Cast") == 2, ops


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_lower_precisions_keep_float32_statistics_outputs(gpu, rng, precision):
    # LayerNormalization's Mean / InvStdDev are float32 by its stash_type
    # whatever x is: lowering x and y must leave them float32 (the kernels
    # write float32 there: typed 16-bit, the writes overran their buffers and
    # read back as NaN).
    from onnx import TensorProto, helper, numpy_helper

    n = 24
    inits = [numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), name) for name in ("s", "b")]
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y", "mean", "inv"], axis=-1)
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("y", "mean", "inv")]
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [37, n])], outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = (rng.standard_normal((37, n)) * 2 + 1).astype(np.float32)
    want = twinfer.load(m, device="cpu").run({"x": x})
    out = twinfer.load(m, device=gpu, precision=precision).run({"x": x})
    tol = 2e-3 if precision == "fp16" else 1.5e-2  # 200 seeds: worst 3.9e-4 / 3.3e-3 (y)
    for name in ("y", "mean", "inv"):
        got = out[name].numpy()
        assert got.dtype == np.float32 and rel_err(got, want[name].numpy()) < tol, name


@pytest.mark.cuda
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_a_callers_tensor_at_any_offset(rng, precision):
    """A PyTorch tensor starting 4 bytes into its storage (a slice): the plan's
    kernels (cuDNN's graphs, cuBLASLt's algorithms) were chosen for the arena's
    alignment, so such an input is copied into the arena rather than read in
    place. Reference: the CPU backend on the same data."""
    torch = pytest.importorskip("torch")
    from onnx import TensorProto, helper, numpy_helper

    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3
    m = rng.standard_normal((15, 6)).astype(np.float32) * 0.3
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("MatMul", ["r", "m"], ["y"])], "offset",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 7, 15])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(m, "m")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    x = rng.standard_normal((2, 3, 7, 15)).astype(np.float32)
    want = twinfer.load(model, device="cpu").run({"x": x})["y"].numpy()
    e = twinfer.load(model, device="cuda", precision=precision, cuda_graphs=False, allow_cpu_fallback=False)
    flat = torch.empty(x.size + 1, device="cuda")
    offset = flat[1:].view(x.shape)
    offset.copy_(torch.from_numpy(x))
    assert offset.data_ptr() % 256 != 0  # off the arena alignment (device_execution.cc copies it)
    got = e.run({"x": offset})["y"]
    torch.cuda.synchronize()
    assert rel_err(np.asarray(torch.from_dlpack(got).cpu()), want) < (1e-5 if precision == "fp32" else 5e-3)


def test_a_sequence_of_device_tensors_reaches_the_host_evaluator(gpu, rng):
    # A sequence input runs through the host evaluator: its device items
    # come to the host, each after the run that wrote it (before, the host
    # read device pointers: NaN on the simulated device, a crash on a GPU).
    import warnings

    from onnx import TensorProto, helper
    from onnx_helpers import make_model
    from twinfer.testing import sim_options

    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [64, 33])
    pos = helper.make_node("Constant", [], ["p"], value=helper.make_tensor("pv", TensorProto.INT64, [], [1]))
    m = make_model([pos, helper.make_node("SequenceAt", ["s", "p"], ["t"]), helper.make_node("Neg", ["t"], ["u"])],
                   [seq], [("u", np.float32, [64, 33])], name="seqat")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "runs through the CPU": the point here
        e = twinfer.load(m, device=gpu)
    producer = twinfer.load(chain_model(), device=gpu)
    with sim_options(max_delay_us=2000):
        for _ in range(3):
            x0, x1 = (rng.standard_normal((64, 33)).astype(np.float32) for _ in range(2))
            y0, y1 = (producer.run({"x": v}, outputs="device")["y"] for v in (x0, x1))
            got = e.run({"s": [y0, y1]}, outputs="host")["u"].numpy()
            assert rel_err(got, -chain_ref(x1)) < 1e-6


def _ort_run(model, feeds):
    from onnx_helpers import run_ort  # caps the IR version at what the installed onnxruntime reads

    return run_ort(model, feeds)


@pytest.mark.cuda_build
@pytest.mark.parametrize("case", ["reduce_axes", "topk_k", "resize_scales"])
def test_a_host_node_reads_an_input_that_keys_the_plan(case, gpu, rng):
    # A node with no device kernel for its dtype (so on the CPU) whose other
    # input is a graph input the plan is keyed by: the plan holds it as a
    # constant, a run binds the caller's tensor staged on the device, and the
    # host kernel read device memory ("a copy is missing").
    from onnx import TensorProto as T
    from onnx import helper

    vi = helper.make_tensor_value_info
    if case == "reduce_axes":
        node = helper.make_node("ReduceSum", ["x", "p"], ["y"], keepdims=1)
        x, p, opset = rng.integers(-50, 50, (3, 5)).astype(np.int64), np.array([1], np.int64), 18
        inputs = [vi("x", T.INT64, [3, 5]), vi("p", T.INT64, [1])]
        outputs = [vi("y", T.INT64, None)]
    elif case == "topk_k":
        node = helper.make_node("TopK", ["x", "p"], ["y", "i"])
        x, p, opset = rng.permutation(24).astype(np.int8).reshape(4, 6), np.array([2], np.int64), 17
        inputs = [vi("x", T.INT8, [4, 6]), vi("p", T.INT64, [1])]
        outputs = [vi("y", T.INT8, None), vi("i", T.INT64, None)]
    else:
        node = helper.make_node("Resize", ["x", "", "p"], ["y"], mode="linear")
        x, p, opset = rng.integers(0, 100, (1, 1, 4, 5)).astype(np.int32), np.array([1, 1, 2, 1.5], np.float32), 18
        inputs = [vi("x", T.INT32, [1, 1, 4, 5]), vi("p", T.FLOAT, [4])]
        outputs = [vi("y", T.INT32, None)]
    m = helper.make_model(helper.make_graph([node], "g", inputs, outputs), opset_imports=[helper.make_opsetid("", opset)])
    e = twinfer.load(m, device=gpu, **({"sim_coverage": "cuda"} if gpu == "sim" else {}))
    feeds = {"x": x, "p": p}
    if gpu == "sim":  # CUDA has no kernel for these dtypes: the node runs on the host
        assert any(r.backend == "cpu" for r in e.kernel_report(feeds))
    # The ONNX reference evaluator (onnxruntime truncates where ONNX's
    # integer Resize rounds).
    from onnx.reference import ReferenceEvaluator

    for _ in range(2):  # the second run replays
        got = e.run(feeds)
        for name, want in zip(node.output, ReferenceEvaluator(m).run(None, feeds)):
            np.testing.assert_array_equal(got[name].numpy(), want, err_msg=name)


@pytest.mark.parametrize("op", ["Resize", "Upsample"])
def test_fp16_engines_keep_resize_scales_in_float32(op, gpu, rng):
    # Lowered to fp16, a scale of 1.1 is 1.0996: 10 rows became 10, not 11,
    # and the engine refused to load ("output differs from the inferred").
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    vi = helper.make_tensor_value_info
    w_scale, w_out = (0.7, 6) if op == "Resize" else (1.3, 11)  # Upsample takes scales >= 1 (onnxruntime)
    scales = numpy_helper.from_array(np.array([1, 1, 1.1, w_scale], np.float32), "s")
    inputs = ["x", "", "s"] if op == "Resize" else ["x", "s"]
    g = helper.make_graph([helper.make_node(op, inputs, ["y"], mode="nearest")], "g", [vi("x", T.FLOAT, [1, 2, 10, 9])],
                          [vi("y", T.FLOAT, None)], [scales])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18 if op == "Resize" else 9)])
    x = rng.standard_normal((1, 2, 10, 9)).astype(np.float32)
    # Resize: the ONNX reference evaluator (onnxruntime rounds the tie at
    # column 3, (3 + 0.5) / 0.7 - 0.5 = 4.5, the other way); Upsample (which
    # the evaluator has only for whole scales, and which floors, no ties):
    # onnxruntime.
    from onnx.reference import ReferenceEvaluator

    want = ReferenceEvaluator(m).run(None, {"x": x})[0] if op == "Resize" else _ort_run(m, {"x": x})[0]
    got = twinfer.load(m, device=gpu, precision="fp16").run({"x": x})["y"].numpy()
    assert got.shape == want.shape == (1, 2, 11, w_out)
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)  # nearest picks: only x's fp16 rounding


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_a_finfo_min_mask_lowered_to_16_bits_stays_finite(precision, gpu, rng):
    """Hugging Face models fill masked scores with torch.finfo(float32).min.
    Lowered to fp16/bf16 that constant was -inf, so a fully masked softmax row
    (a padding token's query in DeBERTa) was NaN, and the next layer spread the
    NaN to every token. Constants now saturate to the largest finite value."""
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    vi = helper.make_tensor_value_info
    fill = numpy_helper.from_array(np.array(np.finfo(np.float32).min, np.float32), "fill")
    v = numpy_helper.from_array(rng.standard_normal((5, 6)).astype(np.float32), "v")
    g = helper.make_graph([helper.make_node("Where", ["mask", "fill", "x"], ["s"]),
                           helper.make_node("Softmax", ["s"], ["p"], axis=-1),
                           helper.make_node("MatMul", ["p", "v"], ["y"])], "g",
                          [vi("x", T.FLOAT, [2, 5, 5]), vi("mask", T.BOOL, [2, 5, 5])], [vi("y", T.FLOAT, None)],
                          [fill, v])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    mask = rng.random((2, 5, 5)) < 0.3
    mask[0, 3, :] = True  # one query row fully masked: uniform weights in float32
    feeds = {"x": rng.standard_normal((2, 5, 5)).astype(np.float32), "mask": mask}
    want = _ort_run(m, feeds)[0]
    got = twinfer.load(m, device=gpu, precision=precision).run(feeds)["y"].numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-2 if precision == "fp16" else 8e-2)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_constants_folded_per_shape_go_with_their_plans(gpu, rng, precision):
    # ConstantOfShape(Shape(x)) folds to a new constant for every input shape.
    # The engine's constant store kept each one's device copy for the engine's
    # life, though only max_cached_plans plans are kept: device memory grew with
    # every shape seen (a decoder's masks and positions, per length).
    from onnx import TensorProto, helper, numpy_helper

    w = rng.standard_normal((16, 16)).astype(np.float32)
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("ConstantOfShape", ["s"], ["c"],
                              value=numpy_helper.from_array(np.array([1.5], np.float32))),
             helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Add", ["h", "c"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "s", 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "s", 16])],
                          [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    # In fp16 each folded constant is converted, then uploaded: two entries
    # of the store that hold each other's tensors.
    e = twinfer.load(m, device=gpu, max_cached_plans=2, precision=precision)
    for s in range(10, 40):
        x = rng.standard_normal((2, s, 16)).astype(np.float32)
        assert rel_err(e.run({"x": x})["y"].numpy(), x @ w + 1.5) < (1e-5 if precision == "fp32" else 5e-3)
    kept = e.memory_report([[2, 39, 16]])["engine_device_constant_bytes"]
    one_shape = 2 * 39 * 16 * 4  # the largest folded constant
    assert kept <= w.nbytes + 6 * one_shape, kept  # 30 shapes' constants were kept before
