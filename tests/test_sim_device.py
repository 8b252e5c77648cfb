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
