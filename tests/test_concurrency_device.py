"""twinfer.Parallel and twinfer.Pipeline on a device (the simulated one in CI,
CUDA where there is a GPU): device hand-over between stages, random stream
delays never changing results (many seeds, the race detector on), a fault
that proves the detector sees a missing wait, profiles timed by device
events, SM shares (green contexts), and the whole group captured as one
graph. References: the same models on the CPU backend."""

import gc
import threading

import numpy as np
import pytest

import twinfer
from concurrency_models import F32, add3, alone, close, conv_head, conv_net, images, mlp
from twinfer.testing import inject_faults, sim_options

GPUS = ["sim", pytest.param("cuda", marks=pytest.mark.cuda)]


@pytest.fixture
def models(rng):
    return {"conv": conv_net(rng), "head": conv_head(rng), "mlp": mlp(rng), "add3": add3()}


@pytest.fixture
def cpu(models):
    return {k: twinfer.load(m, device="cpu") for k, m in models.items()}


def on(gpu, models):
    return {k: twinfer.load(m, device=gpu) for k, m in models.items()}


def pipeline_ref(cpu, x):
    feat = alone(cpu["conv"], {"x": x}, 1)["feat"]
    return alone(cpu["head"], {"feat_in": feat}, 1)["probs"]


def device_tensor(x, gpu):
    """x as a tensor in the device's memory (through a device engine: Identity)."""
    from onnx import helper

    from onnx_helpers import make_model

    ident = make_model([helper.make_node("Identity", ["a"], ["b"])], [("a", F32, list(x.shape))],
                       [("b", F32, list(x.shape))], name="ident")
    return twinfer.load(ident, device=gpu, allow_cpu_fallback=False).run({"a": x}, outputs="device")["b"]


# -- hand-over ---------------------------------------------------------------------
@pytest.mark.parametrize("gpu", GPUS)
def test_pipeline_stages_hand_over_device_tensors(models, cpu, rng, gpu):
    dev = on(gpu, models)
    seen = []
    pipe = twinfer.Pipeline([dev["conv"], dev["head"], lambda out: seen.append(out["probs"]) or out],
                            links={"feat_in": "feat"})
    assert [pipe._outputs_for(i, {"x": np.zeros(1)}) for i in range(2)] == ["device", "host"]
    x = images(rng)
    out = pipe.run({"x": x})
    assert seen[0].device == "cpu"  # a Python function gets host arrays
    close(out["probs"].numpy(), pipeline_ref(cpu, x))

    pipe2 = twinfer.Pipeline([dev["conv"], dev["head"]], links={"feat_in": "feat"})
    host_out = pipe2.run({"x": x})["probs"]
    assert host_out.device == "cpu"  # host arrays in, host arrays out
    dev_out = pipe2.run({"x": device_tensor(x, gpu)})["probs"]
    assert dev_out.device.startswith(gpu)  # a device item stays on the device
    close(dev_out.numpy(), pipeline_ref(cpu, x))


@pytest.mark.parametrize("gpu", GPUS)
def test_parallel_fans_one_device_input_out_without_copies(models, cpu, rng, gpu):
    dev = on(gpu, models)
    x = images(rng)
    xd = device_tensor(x, gpu)
    with twinfer.Parallel([dev["conv"], dev["conv"]]) as par:
        prepared = par.prepare({"x": xd})
        assert prepared[0]["x"] is prepared[1]["x"] and prepared[0]["x"].data_ptr == xd.data_ptr
        a, b = par.run({"x": xd})
        assert a["feat"].device.startswith(gpu) and b["feat"].data_ptr != a["feat"].data_ptr
        ref = alone(cpu["conv"], {"x": x}, 1)["feat"]
        close(a["feat"].numpy(), ref)
        close(b["feat"].numpy(), ref)


class FrameworkArray:
    """A framework's device array (torch's DLPack behaviour) over a twinfer
    tensor: __dlpack__ with no stream (or -1) synchronises nothing; with a
    stream, that stream waits for the array's pending writes."""

    def __init__(self, t, keep=None):
        self._t = t
        self._keep = keep  # what must outlive the pending writes (their engine: its pooled context)

    def __dlpack__(self, stream=None, **kw):
        return self._t.__dlpack__(stream=-1 if stream is None else stream, **kw)

    def __dlpack_device__(self):
        return self._t.__dlpack_device__()


def in_flight(x, gpu):
    """x on the device as a framework array whose writes may still be
    pending (a run left on its stream, the simulated device's delays long)."""
    from onnx import helper

    from onnx_helpers import make_model

    neg = make_model([helper.make_node("Neg", ["a"], ["b"]), helper.make_node("Neg", ["b"], ["c"])],
                     [("a", F32, list(x.shape))], [("c", F32, list(x.shape))], name="negneg")
    # The engine is kept: dropping it would end its context, which waits for the run first.
    producer = twinfer.load(neg, device=gpu)
    return FrameworkArray(producer.run({"a": x}, outputs="device")["c"], keep=producer)


@pytest.mark.parametrize("gpu", GPUS)
def test_groups_read_framework_arrays_after_their_writes(models, cpu, rng, gpu):
    # Parallel members, a Pipeline's stages and graphed groups each run on
    # their own streams: a framework's device array is exported for the
    # stream that reads it, so it is read after its producer's writes.
    dev = on(gpu, models)
    with sim_options(max_delay_us=2000):
        for _ in range(3):
            x, y = images(rng), images(rng)
            ref = {k: alone(cpu["conv"], {"x": v}, 1)["feat"] for k, v in (("x", x), ("y", y))}
            with twinfer.Parallel([dev["conv"], dev["conv"]]) as par:
                a, b = par.run([{"x": in_flight(x, gpu)}, {"x": in_flight(y, gpu)}])
                close(a["feat"].numpy(), ref["x"])
                close(b["feat"].numpy(), ref["y"])
                shared = in_flight(x, gpu)
                a, b = par.run({"x": shared})
                close(a["feat"].numpy(), ref["x"])
                close(b["feat"].numpy(), ref["x"])
                g = par.graphed()
                for _ in range(2):  # eager at the first call, then the graph
                    a, b = g.run([{"x": in_flight(x, gpu)}, {"x": in_flight(y, gpu)}])
                    close(a["feat"].numpy(), ref["x"])
                    close(b["feat"].numpy(), ref["y"])
            with twinfer.Pipeline([dev["conv"], dev["head"]], links={"feat_in": "feat"}) as pipe:
                close(pipe.run({"x": in_flight(x, gpu)})["probs"].numpy(), pipeline_ref(cpu, x))


# -- correctness under reordering ------------------------------------------------------
def test_random_delays_never_change_results(models, cpu, rng):
    """Many seeds of the simulated device's random stream delays, every access
    checked by its race detector: Parallel and pipelined results stay the
    CPU's, in order."""
    xs = [images(rng, n=int(rng.integers(1, 3))) for _ in range(6)]
    vs = [rng.standard_normal((int(rng.integers(1, 5)), 8)).astype(F32) for _ in range(6)]
    feat_ref = [alone(cpu["conv"], {"x": x}, 1)["feat"] for x in xs]
    scores_ref = [alone(cpu["mlp"], {"v": v}, 1)["scores"] for v in vs]
    sum_ref = [f + f + f for f in feat_ref]  # add3(feat, feat, feat)
    for seed in range(1, 9):
        with sim_options(seed=seed, max_delay_us=200):
            dev = on("sim", models)
            with twinfer.Parallel([dev["conv"], dev["mlp"], dev["conv"]]) as par:
                for x, v, f, s in zip(xs, vs, feat_ref, scores_ref):
                    a, b, c = par.run([{"x": x}, {"v": v}, {"x": x}])
                    close(a["feat"].numpy(), f)
                    close(b["scores"].numpy(), s)
                    close(c["feat"].numpy(), f)
            # Three stages, links from two earlier stages and the item, 4 items in flight.
            pipe = twinfer.Pipeline([dev["conv"], dev["head"], dev["add3"]],
                                    links={"add3": {"p": ("conv", "feat"), "q": ("conv", "feat"), "s": ("conv", "feat")}},
                                    names=["conv", "head", "add3"], depth=4)
            for out, want in zip(pipe.map({"x": x} for x in xs), sum_ref):
                close(out["r"].numpy(), want)
            pipe.close()


def test_the_race_detector_sees_a_pipeline_missing_its_event_wait(models, rng):
    """The hand-over is ordered by an event only: without the wait (the
    injected fault) the next stage reads the device tensor too early, and the
    simulated device says so."""
    dev = on("sim", models)
    pipe = twinfer.Pipeline([dev["conv"], dev["head"]], links={"feat_in": "feat"})
    with sim_options(max_delay_us=500), inject_faults("event_wait"):
        with pytest.raises(twinfer.Error, match="simulated device"):
            for _ in range(20):
                list(pipe.map({"x": images(rng)} for _ in range(4)))
    twinfer._core.device_synchronize("sim")


# -- seeing it -----------------------------------------------------------------
@pytest.mark.parametrize("gpu", GPUS)
def test_device_profiles_are_timed_by_events_on_each_stream(models, rng, gpu):
    dev = on(gpu, models)
    clock = "sim-event" if gpu == "sim" else "cuda-event"
    with twinfer.Parallel([dev["conv"], dev["mlp"]]) as par:
        n = 4
        prof = par.profile([{"x": images(rng, n=2, h=17, w=17)}, {"v": rng.standard_normal((3, 8)).astype(F32)}],
                           iterations=n)
    assert prof.clock == clock and {s.clock for s in prof.spans} == {clock}
    for phase in ("alone", "together"):
        for m in par.members:
            spans = sorted((s for s in prof.spans if s.member == m.name and s.phase == phase), key=lambda s: s.start)
            assert sorted(s.item for s in spans) == list(range(n))
            assert all(0 <= s.start < s.end for s in spans)
            assert all(a.end <= b.start + 1e-6 for a, b in zip(spans, spans[1:]))  # one stream: in order
        sel = [s for s in prof.spans if s.phase == phase]
        if phase == "alone":  # the runs' own durations: the host's gaps between them left out
            assert sum(s.end - s.start for s in sel) == pytest.approx(prof.serial_s)
        else:
            assert max(s.end for s in sel) - min(s.start for s in sel) == pytest.approx(prof.concurrent_s)
    alone_spans = sorted((s for s in prof.spans if s.phase == "alone"), key=lambda s: s.start)
    assert all(a.end <= b.start + 1e-6 for a, b in zip(alone_spans, alone_spans[1:]))  # alone: never overlapping
    report = prof.to_dict()
    assert report["clock"] == clock
    for m in report["members"].values():
        assert m["device_bytes"] > 0 and m["arena_bytes"] is not None
    assert "device +" in str(prof) and clock in str(prof)

    pipe = twinfer.Pipeline([dev["conv"], dev["head"]], links={"feat_in": "feat"})
    pprof = pipe.profile([{"x": images(rng)} for _ in range(5)])
    assert pprof.clock == clock and pprof.serial_s > 0 and pprof.concurrent_s > 0
    # A function stage runs on the host: the spans keep their clocks, but the
    # totals are the host's, and the profile says so (it claimed event spans).
    mixed = twinfer.Pipeline([dev["conv"], lambda o: {"feat_in": o["feat"]}, dev["head"]])
    mprof = mixed.profile([{"x": images(rng)} for _ in range(3)])
    assert mprof.clock == "host" and "first start to last end" not in str(mprof)


@pytest.mark.parametrize("gpu", GPUS)
def test_kernel_spans_lie_inside_their_members_runs(models, rng, gpu):
    """profile(kernels=True): every kernel of every run, on its member's
    stream, inside one of that member's runs; none side by side while the
    members run one at a time."""
    dev = on(gpu, models)
    feeds = [{"x": images(rng, n=2, h=17, w=17)}, {"v": rng.standard_normal((3, 8)).astype(F32)}]
    n = 3
    with twinfer.Parallel([dev["conv"], dev["mlp"]]) as par:
        prof = par.profile(feeds, iterations=n, kernels=True)
        per_run = {}
        for m, f in zip(par.members, feeds):
            rows = m.engine.kernel_report({k: v.shape for k, v in f.items()})
            per_run[m.name] = [r for r in rows if r.backend == gpu and r.op != "copy"]
    assert prof.kernels is not None and "kernels traced" in str(prof)
    for phase in ("alone", "together"):
        for name, placed in per_run.items():
            ks = [k for k in prof.kernels if k.member == name and k.phase == phase]
            runs = [s for s in prof.spans if s.member == name and s.phase == phase]
            if gpu == "sim":  # one kernel task per device node, per run
                assert len(ks) == n * len(placed), (name, phase, len(ks), len(placed))
                assert {k.kernel.split(" (")[-1].rstrip(")") for k in ks} <= {r.op.split("::")[-1] for r in placed}
            else:
                assert len(ks) >= n * len(placed)  # a node may launch several kernels
            for k in ks:
                e = prof.kernel_clock_error_s  # the trace's clock against the events'
                assert any(r.start - e <= k.start <= k.end <= r.end + e for r in runs), (k, runs)
    assert prof.kernel_overlap("alone") == 0.0
    assert 0.0 <= prof.kernel_overlap("together") <= 1.0
    fig = prof.plot()  # kernels drawn by default when traced
    assert len(fig.axes[0].collections) == 2 * len(par.members)


def test_kernel_spans_need_a_device_and_a_trace_stops_on_failure(models, rng):
    cpu_par = twinfer.Parallel([twinfer.load(models["mlp"], device="cpu")])
    with pytest.raises(twinfer.InvalidArgumentError, match="kernels=True"):
        cpu_par.profile([{"v": rng.standard_normal((3, 8)).astype(F32)}], kernels=True)
    cpu_par.close()
    dev = on("sim", models)
    with twinfer.Parallel([dev["mlp"]]) as par:
        with pytest.raises(twinfer.ShapeError):
            par.profile([{"v": rng.standard_normal((3, 5)).astype(F32)}], kernels=True)
        prof = par.profile([{"v": rng.standard_normal((3, 8)).astype(F32)}], iterations=2, kernels=True)
        assert prof.kernels and {k.member for k in prof.kernels} == {par.members[0].name}
    twinfer._core.start_kernel_trace("sim")
    try:
        with pytest.raises(twinfer.DeviceError, match="already running"):
            twinfer._core.start_kernel_trace("sim")
    finally:
        twinfer._core.stop_kernel_trace("sim")


# -- SM shares ----------------------------------------------------------------
def test_sm_shares_are_green_context_partitions_on_the_simulated_device(models, cpu, rng):
    dev = on("sim", models)
    par = twinfer.Parallel([(dev["conv"], {"sm_share": 0.5}), (dev["mlp"], {"sm_share": 0.25})])
    # An H100's split: 16 groups of 8 SMs; shares take whole groups.
    assert [m.context.sm_count for m in par.members] == [64, 32]
    assert [m.context.stream.sm_count for m in par.members] == [64, 32]
    x, v = images(rng), rng.standard_normal((3, 8)).astype(F32)
    a, b = par.run([{"x": x}, {"v": v}])
    close(a["feat"].numpy(), alone(cpu["conv"], {"x": x}, 1)["feat"])
    close(b["scores"].numpy(), alone(cpu["mlp"], {"v": v}, 1)["scores"])
    text = str(par.profile([{"x": x}, {"v": v}], iterations=2))
    assert "green context: 64 of 132 SMs (simulated)" in text and "engine0=0.5" in text
    # Partitions never overlap: 0.5 more does not fit while these live, and says why.
    with pytest.raises(twinfer.DeviceError, match="engine0.*8 of sim:0's 16 SM groups.*only 4 are free"):
        twinfer.Parallel([(dev["conv"], {"sm_share": 0.5})])
    small = twinfer.Parallel([(dev["conv"], {"sm_share": 0.01})])  # at least one group
    assert small.members[0].context.sm_count == 8
    par.close()  # gives the members' contexts, and their SMs, back
    small.close()
    whole = twinfer.Parallel([(dev["conv"], {"sm_share": 1.0})])  # everything came back
    assert whole.members[0].context.sm_count == 128
    # A context of its own, outside a Parallel.
    with pytest.raises(twinfer.DeviceError):
        dev["mlp"].create_context(sm_share=0.1)
    whole.close()
    ctx = dev["mlp"].create_context(sm_share=0.1)
    assert ctx.sm_count == 8  # floor(0.1 x 16 groups), at least one: a share is never exceeded
    close(dev["mlp"].run({"v": v}, context=ctx)["scores"].numpy(), alone(cpu["mlp"], {"v": v}, 1)["scores"])


@pytest.mark.parametrize("gpu", GPUS)
def test_closing_gives_sms_back_while_outputs_live_on(models, cpu, rng, gpu):
    # Device outputs hold their context's stream (their memory is freed in
    # its order), not its SM share: close() gives the SMs back at once.
    dev = on(gpu, models)
    x = images(rng)
    par = twinfer.Parallel([(dev["conv"], {"sm_share": 0.5}), (dev["conv"], {"sm_share": 0.5})])
    a, b = (dev["conv"].run({"x": x}, context=m.context, outputs="device")["feat"] for m in par.members)
    par.close()
    whole = twinfer.Parallel([(dev["conv"], {"sm_share": 0.9})])
    (c,) = whole.run([{"x": x}])
    want = alone(cpu["conv"], {"x": x}, 1)["feat"]
    for t in (a, b, c["feat"]):  # the first two, kept across the close, still read right
        close(t.numpy(), want)
    whole.close()
    ctx = dev["conv"].create_context(sm_share=0.5)
    kept = dev["conv"].run({"x": x}, context=ctx, outputs="device")["feat"]
    del ctx
    gc.collect()
    dev["conv"].create_context(sm_share=0.9)
    close(kept.numpy(), want)


@pytest.mark.cuda
def test_sm_shares_on_cuda_run_on_green_contexts(models, cpu, rng):
    dev = on("cuda", models)
    total = twinfer._core.device_sm_count("cuda")
    # Halves fit together whatever the number of SM groups (an H100 has an odd one).
    with twinfer.Parallel([(dev["conv"], {"sm_share": 0.5}), (dev["mlp"], {"sm_share": 0.5})]) as halves:
        assert sum(m.context.sm_count for m in halves.members) <= total
    with twinfer.Parallel([(dev["conv"], {"sm_share": 0.5}), (dev["mlp"], {"sm_share": 0.25})]) as par:
        counts = [m.context.sm_count for m in par.members]
        assert 0 < counts[1] < counts[0] < total
        for _ in range(3):
            x, v = images(rng), rng.standard_normal((3, 8)).astype(F32)
            a, b = par.run([{"x": x}, {"v": v}])
            close(a["feat"].numpy(), alone(cpu["conv"], {"x": x}, 1)["feat"])
            close(b["scores"].numpy(), alone(cpu["mlp"], {"v": v}, 1)["scores"])
        g = par.graphed()
        for _ in range(3):
            a, b = g.run([{"x": x}, {"v": v}])
            close(a["feat"].numpy(), alone(cpu["conv"], {"x": x}, 1)["feat"])


# -- one graph for the group -------------------------------------------------------
@pytest.mark.parametrize("gpu", GPUS)
def test_graphed_parallel_equals_eager_runs(models, cpu, rng, gpu):
    dev = on(gpu, models)
    par = twinfer.Parallel([dev["conv"], dev["mlp"], dev["conv"]])
    g = par.graphed()
    shapes = [(2, 13, 15, 3), (1, 9, 9, 5), (2, 13, 15, 3), (2, 13, 15, 3), (1, 9, 9, 5)]
    for n, h, w, rows in shapes:
        x1, x2 = images(rng, n=n, h=h, w=w), images(rng, n=n, h=h, w=w)
        v = rng.standard_normal((rows, 8)).astype(F32)
        a, b, c = g.run([{"x": x1}, {"v": v}, {"x": x2}])
        assert a["feat"].device == "cpu"
        close(a["feat"].numpy(), alone(cpu["conv"], {"x": x1}, 1)["feat"])
        close(b["scores"].numpy(), alone(cpu["mlp"], {"v": v}, 1)["scores"])
        close(c["feat"].numpy(), alone(cpu["conv"], {"x": x2}, 1)["feat"])
        # Eager runs of the same members in between stay ordered with the graph's.
        e = par.run([{"x": x2}, {"v": v}, {"x": x1}])
        close(e[2]["feat"].numpy(), alone(cpu["conv"], {"x": x1}, 1)["feat"])
    st = g.stats()
    assert st["captures"] == 2 and st["replays"] == 3 and st["graphs"] == 2 and st["nodes"] > 0
    # One dict for all: the graph reads the shared input once; device inputs give device outputs.
    x = images(rng)
    shared = twinfer.Parallel([dev["conv"], dev["conv"]]).graphed()
    for _ in range(3):
        a, b = shared.run({"x": device_tensor(x, gpu)})
        assert a["feat"].device.startswith(gpu)
        close(a["feat"].numpy(), alone(cpu["conv"], {"x": x}, 1)["feat"])
        close(b["feat"].numpy(), alone(cpu["conv"], {"x": x}, 1)["feat"])
    with pytest.raises(twinfer.InvalidArgumentError, match="missing input"):
        g.run([{"x": x}, {}, {"x": x}])


@pytest.mark.parametrize("gpu", GPUS)
def test_graphed_pipeline_equals_the_pipeline(models, cpu, rng, gpu):
    dev = on(gpu, models)
    pipe = twinfer.Pipeline([dev["conv"], dev["head"], dev["add3"]], names=["conv", "head", "add3"],
                            links={"add3": {"p": ("conv", "feat"), "q": ("input", "q"), "s": ("conv", "feat")}})
    g = pipe.graphed()
    for k in range(4):
        x = images(rng, n=2, h=11, w=11)
        q = rng.standard_normal((2, 8, 1, 1)).astype(F32)
        out = g.run({"x": x, "q": q})
        feat = alone(cpu["conv"], {"x": x}, 1)["feat"]
        close(out["r"].numpy(), feat + q + feat)
        close(out["r"].numpy(), pipe.run({"x": x, "q": q})["r"].numpy())
    assert g.stats()["captures"] == 1 and g.stats()["replays"] == 3


def test_graphed_refuses_what_a_graph_cannot_hold(models):
    cpu_models = {k: twinfer.load(m, device="cpu") for k, m in models.items()}
    with pytest.raises(twinfer.InvalidArgumentError, match="one GPU"):
        twinfer.Parallel([cpu_models["conv"]]).graphed()
    dev = on("sim", models)
    with pytest.raises(twinfer.InvalidArgumentError, match="host function"):
        twinfer.Pipeline([dev["conv"], lambda o: o]).graphed()


def test_a_closed_group_refuses_graphed_runs_and_drops_its_graphs(models, cpu, rng):
    # Before: a graphed Parallel kept replaying after close(), its graphs
    # holding the members' contexts and SM shares; unknown feed names, which
    # the eager run refuses, were ignored.
    dev = on("sim", models)
    x = images(rng)
    par = twinfer.Parallel([(dev["conv"], {"sm_share": 0.5})])
    g = par.graphed()
    for _ in range(2):  # captured, then replayed
        (a,) = g.run([{"x": x}])
        close(a["feat"].numpy(), alone(cpu["conv"], {"x": x}, 1)["feat"])
    with pytest.raises(twinfer.InvalidArgumentError, match=r"member 'engine0': unknown input name\(s\) \['y'\]"):
        g.run([{"x": x, "y": x}])
    par.close()
    assert g.stats()["graphs"] == 0
    with pytest.raises(twinfer.InvalidArgumentError, match="is closed"):
        g.run([{"x": x}])
    whole = twinfer.Parallel([(dev["conv"], {"sm_share": 1.0})])  # every SM is free again
    whole.close()
    pipe = twinfer.Pipeline([dev["conv"], dev["head"]])
    gp = pipe.graphed()
    gp.run({"x": x})
    pipe.close()
    with pytest.raises(twinfer.InvalidArgumentError, match="is closed"):
        gp.run({"x": x})


def test_a_groups_evicted_graphs_let_their_members_plans_go(models, cpu, rng):
    # The members' contexts kept every plan and device arena a group's capture
    # used, for their whole life, though the group evicts its graphs (8 shapes
    # kept): RSS grew with every new shape. The group's graph entry keeps them now.
    dev = on("sim", models)
    par = twinfer.Parallel([dev["conv"], dev["mlp"]])
    g = par.graphed()
    for rows in range(1, 12):
        x, v = images(rng, n=1, h=5 + rows, w=7), rng.standard_normal((rows, 8)).astype(F32)
        a, b = g.run([{"x": x}, {"v": v}])
        close(b["scores"].numpy(), alone(cpu["mlp"], {"v": v}, 1)["scores"])
    assert g.stats()["graphs"] == 8
    assert [m.context.graph_stats()["kept_for_callers"] for m in par.members] == [0, 0]
    par.close()


def test_graphed_runs_and_eager_runs_of_the_same_members_from_two_threads(models, cpu, rng):
    # A replay waits for each member's latest run, launches, and makes the
    # member's next run wait for it; an eager run from another thread landed
    # between those steps, waited for nothing and wrote the arena the graph
    # was writing. The group now holds its members' contexts for a call.
    dev = on("sim", models)
    par = twinfer.Parallel([dev["conv"], dev["mlp"]])
    g = par.graphed()
    xs = [images(rng, n=2, h=11, w=11) for _ in range(4)]
    vs = [rng.standard_normal((3, 8)).astype(F32) for _ in range(4)]
    want = [(alone(cpu["conv"], {"x": x}, 1)["feat"], alone(cpu["mlp"], {"v": v}, 1)["scores"]) for x, v in zip(xs, vs)]
    errors = []

    def eager():
        try:
            for k in range(24):
                a, b = par.run([{"x": xs[k % 4]}, {"v": vs[k % 4]}])
                close(a["feat"].numpy(), want[k % 4][0])
                close(b["scores"].numpy(), want[k % 4][1])
        except Exception as exc:  # collected, reported below
            errors.append(exc)

    t = threading.Thread(target=eager)
    t.start()
    try:
        for k in range(24):
            a, b = g.run([{"x": xs[(k + 1) % 4]}, {"v": vs[(k + 1) % 4]}])
            close(a["feat"].numpy(), want[(k + 1) % 4][0])
            close(b["scores"].numpy(), want[(k + 1) % 4][1])
    finally:
        t.join()
    assert not errors, errors
    par.close()
