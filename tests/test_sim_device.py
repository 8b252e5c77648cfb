"""The simulated device catches the bugs a GPU runtime can have, which on a
real GPU show up only sometimes: a missing host<->device copy, a missing
event wait between streams, the host reading results the device has not
finished, and a replayed graph reading stale inputs. Each test makes the
runtime skip that duty on purpose (twinfer.testing.inject_faults) and checks
the simulator turns it into an error or a wrong answer, after checking the
same run is right without the fault."""

import numpy as np
import pytest
from conftest import rel_err
from device_models import chain_model, chain_ref, mixed_model, mixed_ref
from onnx import TensorProto, helper, numpy_helper

import twinfer
from twinfer.testing import FAULTS, inject_faults, sim_options


def test_every_fault_is_tested_here():
    assert set(FAULTS) == {"copy", "event_wait", "host_sync", "graph_input"}


def test_missing_copy_is_an_error(rng):
    x = rng.standard_normal((5, 33)).astype(np.float32)
    ok = twinfer.load(mixed_model(), device="sim")
    assert rel_err(ok.run({"x": x, "flag": np.array(True)})["y"].numpy(), mixed_ref(x, True)) < 1e-6
    with inject_faults("copy"):
        bad = twinfer.load(mixed_model(), device="sim")
        with pytest.raises(twinfer.Error, match="copy is missing"):
            bad.run({"x": x, "flag": np.array(True)})["y"].numpy()
    assert not [r for r in bad.kernel_report({"x": (5, 33), "flag": ()}) if r.backend == "copy"]


def test_missing_event_wait_is_an_error(rng):
    a = twinfer.load(chain_model(), device="sim")
    b = twinfer.load(chain_model(), device="sim")
    ca, cb = a.create_context(), b.create_context()  # two streams
    x = rng.standard_normal((64, 33)).astype(np.float32)
    # Producer on one stream, consumer on another, no synchronisation between.
    y = a.run({"x": x}, context=ca, outputs="device")["y"]
    z = b.run({"x": y}, context=cb, outputs="host")["y"].numpy()
    assert rel_err(z, chain_ref(chain_ref(x))) < 1e-6
    with inject_faults("event_wait"), pytest.raises(twinfer.Error, match="without an event wait"):
        for _ in range(3):
            y = a.run({"x": x}, context=ca, outputs="device")["y"]
            b.run({"x": y}, context=cb, outputs="host")["y"].numpy()


def test_host_step_reading_unfinished_work_is_an_error(rng):
    x = rng.standard_normal((7, 33)).astype(np.float32)
    e = twinfer.load(mixed_model(), device="sim")
    assert rel_err(e.run({"x": x, "flag": np.array(False)})["y"].numpy(), mixed_ref(x, False)) < 1e-6
    with inject_faults("host_sync"), pytest.raises(twinfer.Error, match="without synchronising"):
        e.run({"x": x, "flag": np.array(False)})


def test_host_reading_unfinished_outputs_is_an_error(rng):
    x = rng.standard_normal((64, 33)).astype(np.float32)
    e = twinfer.load(chain_model(), device="sim", cuda_graphs=False)
    assert rel_err(e.run({"x": x})["y"].numpy(), chain_ref(x)) < 1e-6
    with inject_faults("host_sync"), pytest.raises(twinfer.Error, match="without synchronising"):
        e.run({"x": x})  # NumPy in, NumPy out: the outputs are read back without waiting


def test_stale_graph_inputs_give_wrong_answers(rng):
    xs = [rng.standard_normal((16, 33)).astype(np.float32) for _ in range(4)]
    e = twinfer.load(chain_model(), device="sim")
    ctx = e.create_context()
    assert all(rel_err(e.run({"x": x}, context=ctx)["y"].numpy(), chain_ref(x)) < 1e-6 for x in xs)
    assert ctx.graph_stats()["replays"] >= 2  # runs 3 and 4 replayed the graph run 2 captured
    with inject_faults("graph_input"):
        e = twinfer.load(chain_model(), device="sim")
        errors = [rel_err(e.run({"x": x})["y"].numpy(), chain_ref(x)) for x in xs]
    # Run 1 is eager, run 2 captures (with its inputs); replays 3 and 4 see run 2's data.
    assert errors[0] < 1e-6 and errors[1] < 1e-6, errors
    assert errors[2] > 1e-2 and errors[3] > 1e-2, errors


def test_host_cannot_read_device_memory_directly(rng):
    e = twinfer.load(chain_model(), device="sim")
    y = e.run({"x": rng.standard_normal((4, 33)).astype(np.float32)}, outputs="device")["y"]
    assert y.device == "sim:0"
    with pytest.raises(Exception, match="(?i)dlpack|device|unsupported"):
        np.from_dlpack(y)  # NumPy must refuse device memory ...
    assert np.isfinite(y.numpy()).all()  # ... which twinfer copies once it is ready


def test_out_of_device_memory_is_an_error_and_the_engine_still_works(rng):
    e = twinfer.load(chain_model(), device="sim")
    small = rng.standard_normal((4, 33)).astype(np.float32)
    big = rng.standard_normal((20000, 33)).astype(np.float32)  # ~2.6 MB per buffer
    with sim_options(memory_limit=1 << 20):
        with pytest.raises(twinfer.OutOfMemoryError, match="out of memory on sim:0"):
            e.run({"x": big})
        assert rel_err(e.run({"x": small})["y"].numpy(), chain_ref(small)) < 1e-6
    assert rel_err(e.run({"x": big})["y"].numpy(), chain_ref(big)) < 1e-6


def test_frees_still_queued_on_a_stream_do_not_make_an_allocation_fail():
    # Each new shape replaces the context's device arena: the old one is freed
    # in stream order, and the simulated device counted it until its stream ran
    # the free, so a growing decode loop failed where a fresh engine fits the
    # largest step (a GPU's allocator waits for pending frees and tries again).
    import onnx
    from onnx import TensorProto, helper

    e_dim, longest = 64, 300
    g = helper.make_graph(
        [helper.make_node("Concat", ["past", "x"], ["present"], axis=1),
         helper.make_node("MatMul", ["present", "w"], ["hid"]),
         helper.make_node("ReduceSum", ["hid", "axis"], ["y"], keepdims=0)],
        "kv",
        [helper.make_tensor_value_info("past", TensorProto.FLOAT, [1, "P", e_dim]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, e_dim])],
        [helper.make_tensor_value_info("present", TensorProto.FLOAT, [1, "T", e_dim]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, e_dim])],
        [onnx.numpy_helper.from_array(np.eye(e_dim, dtype=np.float32), "w"),
         onnx.numpy_helper.from_array(np.array([1], np.int64), "axis")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10

    def feeds(p):
        return {"past": np.full((1, p, e_dim), 0.5, np.float32), "x": np.ones((1, 1, e_dim), np.float32)}

    with sim_options(memory_limit=360_000):
        fresh = twinfer.load(model, device="sim", plan_ahead=False)
        fresh.run(feeds(longest))  # the longest step fits on its own
        del fresh
        e = twinfer.load(model, device="sim", plan_ahead=False)
        for p in range(longest + 1):
            y = e.run(feeds(p))["y"].numpy()
            np.testing.assert_allclose(y, np.full((1, e_dim), 0.5 * p + 1), rtol=1e-6)


def test_dlpack_keeps_a_sim_tensor_on_the_sim_device(rng):
    e = twinfer.load(chain_model(), device="sim")
    x = rng.standard_normal((2, 33)).astype(np.float32)
    y = e.run({"x": x}, outputs="device")["y"]
    assert y.__dlpack_device__() == (12, 0)  # kDLExtDev: no host framework reads it
    t = twinfer._core.Tensor._from_capsule(y.__dlpack__(stream=None))  # stream None: the host waited
    assert t.device == "sim:0" and t.data_ptr == y.data_ptr
    assert rel_err(t.numpy(), chain_ref(x)) < 1e-6


def test_sim_options_restore_the_settings():
    before = twinfer._core.sim_config()
    with sim_options(max_delay_us=0, seed=7) as now:
        assert now["max_delay_us"] == 0 and twinfer._core.sim_config()["seed"] == 7
    assert twinfer._core.sim_config() == before
    with pytest.raises(ValueError):
        with inject_faults("no_such_fault"):
            pass


# -- device inputs off the arena's alignment ----------------------------------------
# A run reads a device input in place only at the arena's alignment
# (kDeviceArenaAlignment, 256 bytes), which the plan chose its kernels for; an
# input elsewhere (a caller's slice) is copied into its arena slot, after the
# run waits for the event the input is ready at. Tensor._window makes such an
# input here: a view into another engine's device output, written on its own
# stream.

_IMAGE = (2, 3, 7, 15)  # odd sizes
_ONNX = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "int64": TensorProto.INT64}


def _model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "window", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _window_models(rng, dtype):
    """The producer: Neg (then Cast to dtype) over a flat float32 input; the
    consumer: (Cast to float32 ->) Conv -> Relu -> MatMul over a dtype input of shape _IMAGE."""
    cast = dtype != "float32"
    producer = _model(
        [helper.make_node("Neg", ["x"], ["n" if cast else "y"])] +
        ([helper.make_node("Cast", ["n"], ["y"], to=_ONNX[dtype])] if cast else []),
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"])],
        [helper.make_tensor_value_info("y", _ONNX[dtype], ["N"])])
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3
    m = rng.standard_normal((_IMAGE[-1], 6)).astype(np.float32) * 0.3
    consumer = _model(
        ([helper.make_node("Cast", ["x"], ["f"], to=TensorProto.FLOAT)] if cast else []) +
        [helper.make_node("Conv", ["f" if cast else "x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"]), helper.make_node("MatMul", ["r", "m"], ["y"])],
        [helper.make_tensor_value_info("x", _ONNX[dtype], list(_IMAGE))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(m, "m")])
    return producer, consumer


@pytest.mark.parametrize("dtype,offset", [("float32", 4), ("float16", 2), ("int64", 8), ("float32", 256)])
def test_a_device_input_off_the_arena_alignment_is_copied_after_its_ready_event(rng, dtype, offset):
    producer, consumer = _window_models(rng, dtype)
    size, skip = int(np.prod(_IMAGE)), offset // np.dtype(dtype).itemsize
    a = twinfer.load(producer, device="sim")
    cpu = twinfer.load(consumer, device="cpu")
    ca = a.create_context()  # the producer's own stream

    def flat_input():
        v = rng.standard_normal(size + skip + 3)
        return (np.round(v * 3) if dtype == "int64" else v).astype(np.float32)

    def window(flat):
        y = a.run({"x": flat}, context=ca, outputs="device")["y"]  # not waited for
        w = y._window(offset, dtype, _IMAGE)
        assert w.device == "sim:0" and w.data_ptr == y.data_ptr + offset
        assert (w.data_ptr % 256 != 0) == (offset % 256 != 0)
        return w

    # Eager runs (every input in place or copied as its alignment says), and
    # with CUDA graphs (an eager run, a capture, then replays; a graph copies
    # every input into its slot).
    for graphs in (False, True):
        b = twinfer.load(consumer, device="sim", cuda_graphs=graphs)
        cb = b.create_context()
        for seed in (1, 2, 3):
            with sim_options(seed=seed, max_delay_us=200):
                flat = flat_input()
                want = cpu.run({"x": (-flat).astype(dtype)[skip:skip + size].reshape(_IMAGE)})["y"].numpy()
                got = b.run({"x": window(flat)}, context=cb, outputs="host")["y"].numpy()
                assert rel_err(got, want) < 1e-5, (graphs, seed)

    # Without the wait for the input's ready event the race detector names
    # the first reader of the producer's output: the copy into the arena slot
    # for an input off the alignment, the first kernel for one read in place.
    b = twinfer.load(consumer, device="sim", cuda_graphs=False)
    cb = b.create_context()
    reader = "a copy from device to device memory" if offset % 256 else "a kernel"
    with inject_faults("event_wait"), pytest.raises(
            twinfer.Error, match=rf"race: {reader} \(stream \d+\) reads device memory .* without an event wait"):
        b.run({"x": window(flat_input())}, context=cb, outputs="host")


def test_window_shares_the_storage_and_refuses_what_does_not_fit(rng):
    x = rng.standard_normal(10).astype(np.float32)
    on_device = twinfer.load(chain_model(shape=("N",)), device="sim").run({"x": x}, outputs="device")["y"]
    on_host = twinfer._core.Tensor._from_capsule(x.__dlpack__())
    for t in (on_device, on_host):
        values = t.numpy()
        w = t._window(8, "float32", (2, 4))
        assert w.device == t.device and w.data_ptr == t.data_ptr + 8
        assert np.array_equal(w.numpy(), values[2:10].reshape(2, 4))
        assert np.array_equal(t._window(4, "int32", (9,)).numpy(), values[1:].view(np.int32))
        assert w._window(4, "float32", (7,)).data_ptr == t.data_ptr + 12  # from the window's start
        assert t._window(40, "float32", (0,)).size == 0  # empty, at the very end
        with pytest.raises(twinfer.InvalidArgumentError, match="byte_offset must be >= 0"):
            t._window(-4, "float32", (2,))
        with pytest.raises(twinfer.ShapeError, match="goes past the end of the storage"):
            t._window(4, "float32", (10,))  # 4 + 40 bytes of 40
        with pytest.raises(twinfer.ShapeError, match="goes past the end of the storage"):
            w._window(0, "float32", (9,))  # a window's storage is the whole block, not more
        with pytest.raises(twinfer.ShapeError, match="past the end of the storage"):
            t._window(44, "float32", (0,))
        with pytest.raises(twinfer.ShapeError, match="goes past the end"):
            t._window(0, "float32", (1 << 62, 1 << 62))  # no overflow
        with pytest.raises(twinfer.ShapeError, match="negative dimension"):
            t._window(0, "float32", (-1,))
        with pytest.raises(twinfer.InvalidArgumentError, match="not a multiple of float32's size"):
            t._window(2, "float32", (2,))
        with pytest.raises(twinfer.InvalidArgumentError, match="cannot be a string tensor"):
            t._window(0, "string", (1,))
        with pytest.raises(twinfer.Error, match="unknown dtype"):
            t._window(0, "float33", (1,))
    with pytest.raises(twinfer.InvalidArgumentError, match="string tensor holds objects"):
        twinfer._core.Tensor._from_strings(["a", "b"], [2])._window(0, "uint8", (1,))
    # The window keeps the storage alive.
    w = on_device._window(4, "float32", (9,))
    want = on_device.numpy()[1:]
    del on_device
    assert np.array_equal(w.numpy(), want)


# -- CUDA's capture rules, which the simulated device enforces ------------------------
def _fresh():
    return twinfer._core.create_stream("sim"), twinfer._core.create_stream("sim")


def test_a_capture_cannot_wait_on_an_event_recorded_outside_it():
    core = twinfer._core
    s1, s2 = _fresh()
    outside = core.create_event("sim")
    s2.record(outside)
    s1.begin_capture()
    try:
        with pytest.raises(twinfer.Error, match="cudaErrorStreamCaptureIsolation"):
            s1.wait(outside)
    finally:
        s1.end_capture()
    assert not s1.capturing


def test_an_event_recorded_in_a_capture_is_the_graphs_only():
    core = twinfer._core
    s1, s2 = _fresh()
    inside = core.create_event("sim")
    s1.begin_capture()
    s1.record(inside)
    assert inside.captured
    with pytest.raises(twinfer.Error, match="cudaErrorCapturedEvent"):
        inside.synchronize()
    s1.end_capture()
    with pytest.raises(twinfer.Error, match="cudaErrorCapturedEvent"):
        s2.wait(inside)  # the capture has ended: nothing outside may wait on it
    s2.record(inside)  # recorded outside again: an ordinary event
    assert not inside.captured
    inside.synchronize()


def test_forked_streams_join_the_capture_and_must_join_back():
    core = twinfer._core
    s1, s2 = _fresh()
    fork, join = core.create_event("sim"), core.create_event("sim")
    # Joined back: one graph of both streams' work.
    s1.begin_capture()
    s1.record(fork)
    s2.wait(fork)
    assert s2.capturing  # waiting on a captured event pulled s2 into the capture
    s2.record(join)
    s1.wait(join)
    graph = s1.end_capture()
    assert graph.num_nodes == 4 and not s2.capturing
    graph.launch(s1)
    s1.synchronize()
    # Not joined back: end_capture refuses, and both streams leave the capture.
    s1.begin_capture()
    s1.record(fork)
    s2.wait(fork)
    with pytest.raises(twinfer.Error, match="cudaErrorStreamCaptureUnjoined"):
        s1.end_capture()
    assert not s1.capturing and not s2.capturing
    # Only the stream that began a capture ends it.
    s1.begin_capture()
    s1.record(fork)
    s2.wait(fork)
    with pytest.raises(twinfer.Error, match="cudaErrorStreamCaptureUnmatched"):
        s2.end_capture()
    s2.record(join)
    s1.wait(join)
    s1.end_capture()


def test_timing_events_measure_stream_work():
    core = twinfer._core
    s, _ = _fresh()
    start, end, plain = core.create_event("sim", True), core.create_event("sim", True), core.create_event("sim")
    assert start.timed and not plain.timed
    with pytest.raises(twinfer.Error, match="not recorded"):
        core.elapsed_ms("sim", start, end)
    with sim_options(max_delay_us=3000):
        s.record(start)
        s.record(end)  # the worker waits up to 3 ms before each task
        s.synchronize()
    assert 0 <= core.elapsed_ms("sim", start, end) < 1000
    s.record(plain)
    with pytest.raises(twinfer.InvalidArgumentError, match="timing events"):
        core.elapsed_ms("sim", start, plain)
