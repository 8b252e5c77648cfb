"""twinfer.Parallel and twinfer.Pipeline on the CPU: equal results to each
engine run alone and to onnxruntime, order of map, futures and asyncio,
priorities recorded, zero-copy fan-out and hand-over, profiles, and one engine
shared by 8 threads."""

import asyncio
import concurrent.futures
import os
import random
import threading
import time

import numpy as np
import pytest

import twinfer
from concurrency_models import F32, add3, alone, close, conv_head, conv_net, images, mlp
from onnx_helpers import run_ort


@pytest.fixture
def models(rng):
    return {"conv": conv_net(rng), "head": conv_head(rng), "mlp": mlp(rng)}


@pytest.fixture
def engines(models):
    return {k: twinfer.load(m, device="cpu") for k, m in models.items()}


# -- Parallel -------------------------------------------------------------------
def test_parallel_equals_each_engine_alone_and_onnxruntime(models, engines, rng):
    conv, mlp_e = engines["conv"], engines["mlp"]
    with twinfer.Parallel([conv, mlp_e], cores=2) as par:
        assert [m.threads for m in par.members] == [1, 1]
        for _ in range(3):
            x, v = images(rng), rng.standard_normal((int(rng.integers(1, 6)), 8)).astype(F32)
            out_conv, out_mlp = par.run([{"x": x}, {"v": v}])
            np.testing.assert_array_equal(out_conv["feat"].numpy(), alone(conv, {"x": x}, 1)["feat"])
            np.testing.assert_array_equal(out_mlp["scores"].numpy(), alone(mlp_e, {"v": v}, 1)["scores"])
            close(out_conv["feat"].numpy(), run_ort(models["conv"], {"x": x})[0])
            close(out_mlp["scores"].numpy(), run_ort(models["mlp"], {"v": v})[0])


def test_thread_budget_split_and_explicit(engines):
    conv, mlp_e = engines["conv"], engines["mlp"]
    assert [m.threads for m in twinfer.Parallel([conv, mlp_e], cores=2).members] == [1, 1]
    assert [m.threads for m in twinfer.Parallel([conv, mlp_e, conv], cores=4).members] == [2, 1, 1]
    par = twinfer.Parallel([(conv, {"threads": 3}), mlp_e], cores=4)
    assert [m.threads for m in par.members] == [3, 1]
    assert [m.context.num_threads for m in par.members] == [3, 1]
    assert [m.threads for m in twinfer.Parallel([conv, mlp_e], threads=2).members] == [2, 2]
    capped = twinfer.load(conv_net(np.random.default_rng(0)), device="cpu", num_threads=1)
    assert twinfer.Parallel([capped], cores=2).members[0].threads == 1  # never above the engine's own setting
    with pytest.raises(twinfer.InvalidArgumentError):
        twinfer.Parallel([conv], threads=[0])


def test_same_engine_twice_shares_weights_with_own_contexts(models, engines, rng):
    conv = engines["conv"]
    par = twinfer.Parallel([conv, conv], cores=2)
    a, b = par.members
    assert a.engine is b.engine and a.context is not b.context
    x1, x2 = images(rng, h=17, w=11), images(rng, h=9, w=21)
    o1, o2 = par.run([{"x": x1}, {"x": x2}])
    close(o1["feat"].numpy(), run_ort(models["conv"], {"x": x1})[0])
    close(o2["feat"].numpy(), run_ort(models["conv"], {"x": x2})[0])
    assert a.arena_bytes > 0 and b.arena_bytes > 0
    prof = par.profile({"x": x1}, iterations=2, warmup=0)
    assert prof.members[0].shares_weights_with == ("engine1",)
    assert prof.memory == {"engine0": a.context.arena_bytes, "engine1": b.context.arena_bytes}


def test_fan_out_reads_the_same_array_in_place(models, engines, rng):
    conv = engines["conv"]
    par = twinfer.Parallel([conv, (conv, {"threads": 1})], cores=2)
    x = images(rng, n=2, h=15, w=13)
    prepared = par.prepare({"x": x})  # one dict = the same feeds for every member
    assert prepared[0]["x"] is prepared[1]["x"]
    assert prepared[0]["x"].data_ptr == prepared[1]["x"].data_ptr == x.ctypes.data
    # Overwrite the array after preparing: both members must see the new values.
    x[...] = rng.standard_normal(x.shape).astype(F32)
    o1, o2 = par.run(prepared)
    (ref,) = run_ort(models["conv"], {"x": x})
    close(o1["feat"].numpy(), ref)
    close(o2["feat"].numpy(), ref)
    # Passing the array itself in two feed dicts converts it once, without a copy.
    t = par.prepare([{"x": x}, {"x": x}])
    assert t[0]["x"] is t[1]["x"] and t[0]["x"].data_ptr == x.ctypes.data


def test_submit_returns_futures_and_asyncio_awaits_them(models, engines, rng):
    conv, mlp_e = engines["conv"], engines["mlp"]
    par = twinfer.Parallel([conv, mlp_e], cores=2)
    x, v = images(rng), rng.standard_normal((3, 8)).astype(F32)
    futures = par.submit([{"x": x}, {"v": v}])
    assert all(isinstance(f, concurrent.futures.Future) for f in futures)
    close(futures[0].result()["feat"].numpy(), run_ort(models["conv"], {"x": x})[0])
    close(futures[1].result()["scores"].numpy(), run_ort(models["mlp"], {"v": v})[0])

    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        t = asyncio.ensure_future(ticker())
        outs = await par.run_async([{"x": x}, {"v": v}])
        wrapped = await asyncio.gather(*[asyncio.wrap_future(f) for f in par.submit([{"x": x}, {"v": v}])])
        t.cancel()
        return outs, wrapped, ticks

    outs, wrapped, ticks = asyncio.run(main())
    assert ticks > 0  # the loop ran other work while awaiting
    for got in (outs, wrapped):
        np.testing.assert_array_equal(got[0]["feat"].numpy(), futures[0].result()["feat"].numpy())
        np.testing.assert_array_equal(got[1]["scores"].numpy(), futures[1].result()["scores"].numpy())


def test_member_error_is_raised_and_members_stay_usable(engines, rng):
    conv, mlp_e = engines["conv"], engines["mlp"]
    par = twinfer.Parallel([conv, mlp_e], cores=2)
    x = images(rng)
    with pytest.raises(twinfer.Error):
        par.run([{"x": x}, {"v": rng.standard_normal((2, 7)).astype(F32)}])  # mlp wants [N, 8]
    with pytest.raises(twinfer.InvalidArgumentError):
        par.run([{"x": x}])  # one dict for two members
    with pytest.raises(twinfer.InvalidArgumentError):
        asyncio.run(par.run_async([{"x": x}, {"wrong": x}]))
    out = par.run([{"x": x}, {"v": rng.standard_normal((2, 8)).astype(F32)}])
    np.testing.assert_array_equal(out[0]["feat"].numpy(), alone(conv, {"x": x}, 1)["feat"])


def test_priorities_are_recorded_and_sm_share_refused_on_the_cpu(engines, rng):
    conv, mlp_e = engines["conv"], engines["mlp"]
    par = twinfer.Parallel([(conv, {"priority": "high", "name": "vision"}), mlp_e], cores=2)
    assert [m.priority for m in par.members] == ["high", "normal"]
    assert [m.name for m in par.members] == ["vision", "engine1"]
    par2 = twinfer.Parallel([conv, mlp_e], priorities=["low", "high"], cores=2)
    assert [m.priority for m in par2.members] == ["low", "high"]
    prof = par.profile([{"x": images(rng)}, {"v": rng.standard_normal((2, 8)).astype(F32)}], iterations=2)
    text = str(prof)
    assert "no effect on the CPU backend" in text and "vision=high" in text
    d = prof.to_dict()["members"]
    assert d["vision"]["priority"] == "high" and d["engine1"]["sm_share"] is None
    assert "no effect on the CPU backend" in d["vision"]["priority_effect"]
    # sm_share is a GPU partition: accepting it on the CPU would be a silent no-op.
    with pytest.raises(twinfer.InvalidArgumentError, match="engine1.*sm_share.*CPU"):
        twinfer.Parallel([conv, (mlp_e, {"sm_share": 0.25})], cores=2)
    with pytest.raises(twinfer.InvalidArgumentError, match="host function takes no 'sm_share'"):
        twinfer.Pipeline([conv, (lambda out: out, {"sm_share": 0.5})])
    for bad in ({"priority": "urgent"}, {"sm_share": 1.5}, {"colour": "red"}):
        with pytest.raises(twinfer.InvalidArgumentError):
            twinfer.Parallel([(conv, bad)])
    with pytest.raises(twinfer.InvalidArgumentError):  # the same option given twice
        twinfer.Parallel([(conv, {"priority": "high"})], priorities=["low"])


def test_parallel_profile_is_sane(engines, rng):
    conv, mlp_e = engines["conv"], engines["mlp"]
    par = twinfer.Parallel([conv, mlp_e, conv], cores=2)
    n = 5
    prof = par.profile([{"x": images(rng, n=2, h=19, w=19)}, {"v": rng.standard_normal((4, 8)).astype(F32)},
                        {"x": images(rng, n=1, h=11, w=23)}], iterations=n)
    assert prof.serial_s > 0 and prof.concurrent_s > 0 and prof.overlap > 0
    assert prof.overlap == pytest.approx(prof.serial_s / prof.concurrent_s)
    names = [m.name for m in par.members]
    for phase in ("alone", "together"):
        for name in names:
            spans = [s for s in prof.spans if s.member == name and s.phase == phase]
            assert sorted(s.item for s in spans) == list(range(n))
            assert all(0 <= s.start <= s.end for s in spans)
            spans.sort(key=lambda s: s.start)
            assert all(a.end <= b.start for a, b in zip(spans, spans[1:]))  # one context: one run at a time
            p = [prof.latency_ms(name, phase, q) for q in (50, 90, 99)]
            assert 0 < p[0] <= p[1] <= p[2]
    alone = sorted((s for s in prof.spans if s.phase == "alone"), key=lambda s: s.start)
    assert all(a.end <= b.start for a, b in zip(alone, alone[1:]))  # alone = strictly back to back
    assert [s.member for s in alone[:3]] == names and all(s.clock == "host" for s in prof.spans)
    assert all(v > 0 for v in prof.memory.values())
    assert "overlap" in str(prof) and all(nm in str(prof) for nm in names)
    html = prof._repr_html_()
    assert html.count("<table") == 2 and all(nm in html for nm in names)


def test_profile_plot_is_a_gantt_with_one_row_per_member(engines, rng):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.collections import PolyCollection
    from matplotlib.figure import Figure

    par = twinfer.Parallel([engines["conv"], engines["mlp"]], cores=2)
    prof = par.profile([{"x": images(rng)}, {"v": rng.standard_normal((2, 8)).astype(F32)}], iterations=4)
    fig = prof.plot()
    assert isinstance(fig, Figure)
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_yticklabels()] == ["engine0", "engine1"]
    rows = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(rows) == 2 and all(len(r.get_paths()) == 4 for r in rows)
    fig.savefig(os.devnull, format="png")


@pytest.mark.parametrize("gpu", ["sim", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_parallel_and_pipeline_on_a_device(models, engines, rng, gpu):
    dev = {k: twinfer.load(m, device=gpu) for k, m in models.items()}
    with twinfer.Parallel([(dev["conv"], {"priority": "high"}), (dev["mlp"], {"priority": "low"}),
                           (dev["mlp"], {"priority": "normal"})]) as par:
        least, greatest = twinfer.stream_priority_range(gpu)
        high, low, normal = [m.context.stream.priority for m in par.members]
        assert (high, low) == (greatest, least) and greatest < normal < least  # lower is more urgent
        for _ in range(3):
            x, v = images(rng), rng.standard_normal((int(rng.integers(1, 6)), 8)).astype(F32)
            out_conv, out_mlp, out_mlp2 = par.run([{"x": x}, {"v": v}, {"v": v}])
            close(out_conv["feat"].numpy(), alone(engines["conv"], {"x": x}, 1)["feat"])
            close(out_mlp["scores"].numpy(), alone(engines["mlp"], {"v": v}, 1)["scores"])
            close(out_mlp2["scores"].numpy(), alone(engines["mlp"], {"v": v}, 1)["scores"])
    pipe = twinfer.Pipeline([dev["conv"], dev["head"]], links={"feat_in": "feat"})
    xs = [images(rng) for _ in range(5)]
    for x, out in zip(xs, pipe.map({"x": x} for x in xs)):
        feat = alone(engines["conv"], {"x": x}, 1)["feat"]
        close(out["probs"].numpy(), alone(engines["head"], {"feat_in": feat}, 1)["probs"])


# -- Pipeline -------------------------------------------------------------------
def test_pipeline_equals_sequential_runs_and_onnxruntime(models, engines, rng):
    conv, head = engines["conv"], engines["head"]
    pipe = twinfer.Pipeline([conv, head], links={"feat_in": "feat"}, cores=2)
    xs = [images(rng) for _ in range(7)]
    got = list(pipe.map({"x": x} for x in xs))
    assert len(got) == len(xs)
    for x, out in zip(xs, got):
        feat = alone(conv, {"x": x}, 1)["feat"]
        np.testing.assert_array_equal(out["probs"].numpy(), alone(head, {"feat_in": feat}, 1)["probs"])
        (ref_feat,) = run_ort(models["conv"], {"x": x})
        close(out["probs"].numpy(), run_ort(models["head"], {"feat_in": ref_feat})[0])
    # links by default: one output into one input, whatever their names
    close(twinfer.Pipeline([conv, head]).run({"x": xs[0]})["probs"].numpy(), got[0]["probs"].numpy())


def test_map_keeps_input_order_with_varying_stage_times(models, engines, rng):
    conv, mlp_e = engines["conv"], engines["mlp"]
    seen = {}
    lock = threading.Lock()
    delays = random.Random(int(rng.integers(1 << 30)))

    def log(stage, k, t0):
        with lock:
            seen[(stage, k)] = (t0, time.perf_counter())

    def pre(item):  # host function first: makes the engine's input, slow for some items
        t0 = time.perf_counter()
        time.sleep(delays.choice([0.0, 0.002, 0.012]))
        log("pre", item["id"], t0)
        return {"x": item["image"]}

    def flatten(out, item):  # between engines: [N, 8, 1, 1] -> [N, 8], with the item for its id
        t0 = time.perf_counter()
        assert isinstance(out["feat"], twinfer.Tensor)  # handed over as the engine's Tensor
        time.sleep(delays.choice([0.0, 0.004, 0.015]))
        log("flatten", item["id"], t0)
        return {"v": out["feat"].numpy().reshape(out["feat"].shape[0], -1)}

    def post(out, item):
        return item["id"], out["scores"].numpy().copy()

    items = [{"id": k, "image": images(rng)} for k in range(12)]
    pipe = twinfer.Pipeline([pre, conv, flatten, mlp_e, post], cores=2, depth=4)
    assert [m.name for m in pipe.members] == ["pre", "stage1", "flatten", "stage3", "post"]
    results = list(pipe.map(iter(items)))
    assert [r[0] for r in results] == list(range(12))
    for item, (_, scores) in zip(items, results):
        (feat,) = run_ort(models["conv"], {"x": item["image"]})
        close(scores, run_ort(models["mlp"], {"v": feat.reshape(feat.shape[0], -1)})[0])
    # Several items were in flight: some item k+1 was pre-processed while item k was still in flatten.
    assert any(seen[("pre", k + 1)][0] < seen[("flatten", k)][1] for k in range(11))


def test_map_reads_items_lazily_and_depth_bounds_in_flight(engines, rng):
    taken = []

    def source():
        for k in range(10):
            taken.append(k)
            yield {"x": images(rng, n=1, h=9, w=9)}

    pipe = twinfer.Pipeline([engines["conv"], engines["head"]], depth=3)
    it = pipe.map(source())
    next(it)
    assert len(taken) == 3  # the first result needs 3 items read, no more
    assert len(list(it)) == 9


def test_links_for_more_stages_earlier_outputs_and_item(models, engines, rng):
    conv, head = engines["conv"], engines["head"]
    mid_model = conv_head(rng, k=8, inp="u", out="w")  # [N,8,1,1] -> [N,8,1,1]
    relu_conv = twinfer.load(mid_model, device="cpu")
    adder = twinfer.load(add3(), device="cpu")
    links = {"sum": {"p": "w", "q": ("stage0", "feat"), "s": ("input", "bias")}}
    pipe = twinfer.Pipeline([conv, relu_conv, adder], links=links, names=["stage0", "mid", "sum"])
    x = images(rng, n=2)
    bias = rng.standard_normal((2, 8, 1, 1)).astype(F32)
    out = pipe.run({"x": x, "bias": bias})["r"].numpy()
    (feat,) = run_ort(models["conv"], {"x": x})
    (w,) = run_ort(mid_model, {"u": feat})
    close(out, w + feat + bias)
    # the same links as a list, one entry per stage, and by stage index
    as_list = twinfer.Pipeline([conv, relu_conv, adder], links=[None, None, links["sum"] | {"q": (0, "feat")}])
    close(as_list.run({"x": x, "bias": bias})["r"].numpy(), out)
    # bad links are refused when the pipeline is built, missing sources when an item runs
    with pytest.raises(twinfer.InvalidArgumentError, match="no output"):
        twinfer.Pipeline([conv, head], links={"feat_in": "nope"})
    with pytest.raises(twinfer.InvalidArgumentError):
        twinfer.Pipeline([conv, head], links={"not_an_input": "feat"})
    names = ["stage0", "mid", "sum"]
    with pytest.raises(twinfer.InvalidArgumentError, match="earlier stage"):
        twinfer.Pipeline([conv, relu_conv, adder], links={"sum": {"q": ("sum", "r")}}, names=names)
    with pytest.raises(twinfer.InvalidArgumentError, match="no source"):  # q and s unlinked, not in the item
        twinfer.Pipeline([conv, relu_conv, adder], links={"sum": {"p": "w"}}, names=names).run({"x": x})


def test_pipeline_futures_asyncio_and_errors(models, engines, rng):
    conv, head = engines["conv"], engines["head"]
    pipe = twinfer.Pipeline([(conv, {"priority": "high"}), head], priorities=None)
    x = images(rng)
    fut = pipe.submit({"x": x})
    assert isinstance(fut, concurrent.futures.Future)
    expected = run_ort(models["head"], {"feat_in": run_ort(models["conv"], {"x": x})[0]})[0]
    close(fut.result()["probs"].numpy(), expected)
    close(asyncio.run(pipe.run_async({"x": x}))["probs"].numpy(), expected)
    # A failing item raises at its turn; the items around it are fine.
    items = [{"x": x}, {"x": rng.standard_normal((1, 4, 9, 9)).astype(F32)}, {"x": x}]
    it = pipe.map(items)
    close(next(it)["probs"].numpy(), expected)
    with pytest.raises(twinfer.Error):
        next(it)
    close(pipe.run({"x": x})["probs"].numpy(), expected)
    assert [m.priority for m in pipe.members] == ["high", "normal"]
    assert "no effect on the CPU backend" in pipe.members[0].priority_effect


def test_a_finished_items_data_is_freed_without_the_cycle_collector(engines, rng):
    # Pipeline._submit's closures (advance <-> done) were a reference cycle
    # holding each item and every stage's outputs until a full collection:
    # with 16 MiB items, 1 GB of finished items. With the collector off, an
    # item must go when its caller drops it (and an error's traceback with it).
    import gc
    import weakref

    made = []

    def flatten(out):  # a function stage's output: one of "every stage's outputs"
        feat = out["feat"].numpy().copy()
        made.append(weakref.ref(feat))
        return {"feat_in": feat}

    def gone(refs, wait=0.0):
        # The stage's worker lets go of its last result a moment after the next
        # stage took it; a cycle would keep it for good.
        deadline = time.monotonic() + wait
        while any(r() is not None for r in refs) and time.monotonic() < deadline:
            time.sleep(0.01)
        return all(r() is None for r in refs)

    def item():
        x = images(rng)
        return {"x": x}, weakref.ref(x)

    with twinfer.Pipeline([engines["conv"], flatten, engines["head"]]) as pipe:
        pipe.run(item()[0])  # warm
        gc.collect()
        gc.disable()
        try:
            feeds, x = item()
            out = pipe.run(feeds)
            del feeds
            assert x() is None and gone(made, wait=10)
            assert out["probs"].numpy().shape[1] == 5
            feeds, x = item()
            fut = pipe.submit(feeds)
            del feeds
            fut.result()
            assert x() is None
            pairs = [item() for _ in range(5)]
            refs = [r for _, r in pairs]
            for _ in pipe.map(iter([f for f, _ in pairs]), depth=2):
                pass
            del pairs, _
            assert gone(refs) and gone(made, wait=10)
            feeds, x = item()
            feeds["x"] = feeds["x"][:, :2]  # 2 channels for a 3-channel conv: the stage fails
            with pytest.raises(twinfer.Error):
                pipe.run(feeds)
            del feeds
            assert x() is None
        finally:
            gc.enable()


def test_pipeline_profile_is_sane(engines, rng):
    def flatten(out):
        return {"v": out["feat"].numpy().reshape(out["feat"].shape[0], -1)}

    pipe = twinfer.Pipeline([engines["conv"], flatten, engines["mlp"]], cores=2)
    items = [{"x": images(rng)} for _ in range(6)]
    prof = pipe.profile(items)
    assert prof.kind == "pipeline" and prof.count == 6 and prof.overlap > 0
    names = [m.name for m in pipe.members]
    assert names == ["stage0", "flatten", "stage2"]
    for phase in ("alone", "together"):
        by = {(s.member, s.item): s for s in prof.spans if s.phase == phase}
        assert len(by) == 3 * 6
        for k in range(6):  # each item goes through the stages in order
            assert by[("stage0", k)].end <= by[("flatten", k)].start
            assert by[("flatten", k)].end <= by[("stage2", k)].start
        for name in names:  # and each stage takes the items in order
            assert all(by[(name, k)].end <= by[(name, k + 1)].start for k in range(5))
    assert prof.memory["flatten"] is None and prof.memory["stage0"] > 0
    assert "pipelined" in str(prof) and "<table" in prof._repr_html_()
    fig = prof.plot()
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == names


# -- one engine, 8 threads --------------------------------------------------------
def test_one_conv_engine_shared_by_eight_threads(models, rng):
    engine = twinfer.load(models["conv"], device="cpu", num_threads=1)
    inputs = [images(rng, n=1 + i % 3, h=9 + i, w=23 - i) for i in range(16)]
    expected = [engine.run({"x": x})["feat"].numpy().copy() for x in inputs]  # single-threaded reference
    errors = []

    def worker(k):
        try:
            for _ in range(4):
                for i in range(k, len(inputs), 8):
                    np.testing.assert_array_equal(engine.run({"x": inputs[i]})["feat"].numpy(), expected[i])
        except Exception as exc:  # collected, reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors

    # The same through Parallel: 8 members, one engine, 8 contexts.
    par = twinfer.Parallel([engine] * 8, threads=1)
    for rep in range(3):
        chunk = [inputs[(rep * 8 + j) % 16] for j in range(8)]
        outs = par.run([{"x": x} for x in chunk])
        for j, out in enumerate(outs):
            np.testing.assert_array_equal(out["feat"].numpy(), expected[(rep * 8 + j) % 16])
    for i in (0, 7, 15):
        close(expected[i], run_ort(models["conv"], {"x": inputs[i]})[0])


@pytest.mark.parametrize("device", ["cpu", "sim"])
def test_one_context_shared_by_four_threads_takes_turns(models, rng, device):
    """A context runs one thing at a time: threads sharing one wait for each
    other. Before, the second run rebound the arenas the first was writing
    through: wrong results, then heap corruption (CPU) or race errors (sim)."""
    engine = twinfer.load(models["conv"], device=device, num_threads=1)
    ctx = engine.create_context(1)
    inputs = [images(rng, n=1 + i % 3, h=9 + 3 * i, w=23 - i) for i in range(8)]
    expected = [alone(engine, {"x": x}, 1)["feat"] for x in inputs]
    errors = []

    def worker(k):
        try:
            for rep in range(6):
                i = (k + rep) % len(inputs)
                np.testing.assert_array_equal(engine.run({"x": inputs[i]}, context=ctx)["feat"].numpy(), expected[i])
        except Exception as exc:  # collected, reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    close(expected[3], run_ort(models["conv"], {"x": inputs[3]})[0])


def _add_model():
    from onnx import TensorProto as TP
    from onnx import helper as h

    vi = h.make_tensor_value_info
    g = h.make_graph([h.make_node("Add", ["p", "q"], ["s"])], "g", [vi("p", TP.FLOAT, ["n", 4]), vi("q", TP.FLOAT, ["n", 4])],
                     [vi("s", TP.FLOAT, ["n", 4])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def _neg_model(inp="x", out="h", dtype=None):
    from onnx import TensorProto as TP
    from onnx import helper as h

    t = dtype or TP.FLOAT
    vi = h.make_tensor_value_info
    g = h.make_graph([h.make_node("Neg", [inp], [out])], "g", [vi(inp, t, ["n", 4])], [vi(out, t, ["n", 4])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


@pytest.mark.parametrize("device", ["cpu", "sim"])
def test_a_linked_output_is_not_also_handed_to_another_input(device, rng):
    # B's p is linked to A's only output h; B's q comes from the item. The
    # "previous stage's one unused output" rule fed h to q as well (h + h).
    a, b = twinfer.load(_neg_model(), device=device), twinfer.load(_add_model(), device=device)
    pipe = twinfer.Pipeline([a, b], links={"p": "h"})
    x, q = rng.standard_normal((2, 4)).astype(np.float32), rng.standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_allclose(pipe.run({"x": x, "q": q})["s"].numpy(), -x + q, rtol=1e-6)
    if device == "sim":
        g = pipe.graphed()
        for _ in range(2):
            np.testing.assert_allclose(g.run({"x": x, "q": q})["s"].numpy(), -x + q, rtol=1e-6)


def test_one_list_for_members_of_different_input_types(rng):
    # A Python list was converted once, to the first member's type, and that
    # tensor went to every member ("expects int64, got float32").
    from onnx import TensorProto as TP

    f32, i64 = twinfer.load(_neg_model()), twinfer.load(_neg_model(dtype=TP.INT64))
    data = [[1, 2, 3, 4]]
    for members in ([f32, i64], [i64, f32]):
        outs = twinfer.Parallel(members).run({"x": data})
        assert [o["h"].numpy().tolist() for o in outs] == [[[-1, -2, -3, -4]]] * 2


def test_a_batcher_closed_from_its_listener_answers_and_stops(rng):
    # Two workers inside the listener, each closing: each close() joined the
    # other worker, and neither request was ever answered.
    import concurrent.futures as cf
    import time

    e = twinfer.load(_neg_model())
    box = {}

    def listener(record):
        time.sleep(0.05)
        box["b"].close()

    b = box["b"] = twinfer.Batcher(e, max_batch_size=1, instances=2, listener=listener)
    xs = [rng.standard_normal((1, 4)).astype(np.float32) for _ in range(2)]
    futures = [b.submit({"x": x}) for x in xs]
    done = cf.wait(futures, timeout=10).done
    assert len(done) == 2
    for x, f in zip(xs, futures):
        np.testing.assert_array_equal(f.result()["h"], -x)


def test_a_cpu_stage_linked_to_an_earlier_device_stage_gets_a_host_copy(rng):
    # A (sim) -> B (sim) -> C (cpu) with C linked to A's output: A's outputs
    # stayed on the device for B, and C refused them ("is on sim:0").
    a, b = twinfer.load(_neg_model(), device="sim"), twinfer.load(_neg_model("h", "k"), device="sim")
    c = twinfer.load(_add_model())
    pipe = twinfer.Pipeline([a, b, c], links={"stage2": {"p": (0, "h"), "q": (1, "k")}})
    x = rng.standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_allclose(pipe.run({"x": x})["s"].numpy(), -x + x, atol=1e-6)


def test_misused_options_are_named():
    e = twinfer.load(_neg_model())
    for kwargs, message in [({"threads": [1.9]}, "threads must be a whole number"),
                            ({"cores": -3}, "cores must be at least 1"),
                            ({"sm_shares": ["half"]}, "sm_share must be a number")]:
        with pytest.raises(twinfer.InvalidArgumentError, match=message):
            twinfer.Parallel([e], **kwargs)
    par = twinfer.Parallel([e])
    with pytest.raises(twinfer.InvalidArgumentError, match="feeds must be a dict"):
        par.run(None)
    profile = par.profile({"x": np.ones((1, 4), np.float32)}, iterations=2)
    with pytest.raises(twinfer.InvalidArgumentError, match="phase must be 'alone' or 'together'"):
        profile.latency_ms(par.members[0].name, "concurrent")
    par.close()


def test_errors_name_the_member_or_stage_they_come_from(engines, rng):
    # Before: a member's error came out bare, and with several members of one
    # engine nothing said which had failed.
    conv = engines["conv"]
    bad = rng.standard_normal((2, 3, 9)).astype(F32)  # rank 3 for a rank-4 input
    with twinfer.Parallel([conv, conv], names=["left", "right"]) as par:
        with pytest.raises(twinfer.ShapeError) as info:
            par.run([{"x": images(rng)}, {"x": bad}])
        assert "raised in Parallel member 'right'" in info.value.__notes__
        assert "left" not in " ".join(info.value.__notes__)

    def crop(outputs):
        raise ValueError("no detections")

    with twinfer.Pipeline([conv, crop]) as pipe:
        with pytest.raises(ValueError, match="no detections") as info:
            pipe.run({"x": images(rng)})
        assert info.value.__notes__ == ["raised in Pipeline stage 'crop'"]


def test_a_function_stage_keeps_the_default_of_its_second_parameter(engines, rng):
    # Before: fn(x, scale=2) was called fn(x, item): its default was lost.
    def scaled(outputs, scale=2.0):
        return {"feat": outputs["feat"].numpy() * scale}

    def with_item(outputs, item):
        return {"feat": outputs["feat"].numpy() + item["x"].sum()}

    x = images(rng)
    feat = alone(engines["conv"], {"x": x}, 1)["feat"]
    with twinfer.Pipeline([engines["conv"], scaled]) as pipe:
        close(pipe.run({"x": x})["feat"], feat * 2.0)
    with twinfer.Pipeline([engines["conv"], with_item]) as pipe:
        close(pipe.run({"x": x})["feat"], feat + x.sum())


def test_reading_a_contexts_stats_while_it_runs_borrowed_tensors_does_not_deadlock():
    # graph_stats() held the GIL while waiting for the context's lock, and a
    # run holding that lock waited for the GIL to release a borrowed (DLPack)
    # input: the interpreter hung. The stats now wait without the GIL.
    import sys

    from onnx import TensorProto as TP
    from onnx import helper as h

    g = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "g", [h.make_tensor_value_info("x", TP.FLOAT, [4])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [4])])
    e = twinfer.load(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), device="sim")
    ctx = e.create_context()
    dev = e.run({"x": np.ones(4, np.float32)}, context=ctx, outputs="device")["y"]

    class Foreign:  # a framework's array: imported by DLPack, released through Python
        def __dlpack__(self, **kw):
            return dev.__dlpack__(**kw)

        def __dlpack_device__(self):
            return dev.__dlpack_device__()

    done = threading.Event()

    def runs():
        for _ in range(800):
            e.run({"x": Foreign()}, context=ctx, outputs="device")
        done.set()

    def stats():
        while not done.is_set():
            ctx.graph_stats()
            ctx.step_times()

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)  # many GIL hand-overs: the window is hit within a few hundred runs
    try:
        threads = [threading.Thread(target=f, daemon=True) for f in (runs, stats)]
        for t in threads:
            t.start()
        assert done.wait(120), "the runs hung"
    finally:
        sys.setswitchinterval(old)
    for t in threads:
        t.join(10)
    np.testing.assert_array_equal(dev.numpy(), np.ones(4, np.float32))
