"""GraphedPipeline.map: a Pipeline's stages captured so that one launch runs
stage s on item j - s (runtime/pipelined_graph.h), the hand-overs waiting
between launches in delay lines. Checked against the same models on the CPU
backend, item by item and in order, on the simulated device (its race
detector on, random stream delays) and on CUDA."""

import numpy as np
import pytest
from onnx import helper

import twinfer
from concurrency_models import F32, add3, alone, close, conv_head, conv_net, images
from onnx_helpers import make_model
from twinfer.testing import sim_options

GPUS = ["sim", pytest.param("cuda", marks=pytest.mark.cuda)]


@pytest.fixture
def models(rng):
    return {"conv": conv_net(rng), "head": conv_head(rng), "add3": add3()}


def three_stages(models, gpu):
    """conv -> head -> add3(conv's feat, the item's q, conv's feat): add3 reads
    a value two stages back and an item input two launches late."""
    dev = {k: twinfer.load(m, device=gpu) for k, m in models.items()}
    return twinfer.Pipeline([dev["conv"], dev["head"], dev["add3"]], names=["conv", "head", "add3"],
                            links={"head": {"feat_in": ("conv", "feat")},
                                   "add3": {"p": ("conv", "feat"), "q": ("input", "q"), "s": ("conv", "feat")}})


def item(rng, n, h, w):
    return {"x": images(rng, n=n, h=h, w=w), "q": rng.standard_normal((n, 8, 1, 1)).astype(F32)}


def reference(cpu_conv, it):
    feat = alone(cpu_conv, {"x": it["x"]}, 1)["feat"]
    return feat + it["q"] + feat


@pytest.mark.parametrize("gpu", GPUS)
def test_map_gives_each_items_result_in_order_across_shape_changes(models, rng, gpu):
    cpu_conv = twinfer.load(models["conv"], device="cpu")
    pipe = three_stages(models, gpu)
    g = pipe.graphed()
    # Shapes A x4, B, A x3, B x2: each change drains the items in flight first.
    shapes = [(2, 11, 13)] * 4 + [(1, 9, 17)] + [(2, 11, 13)] * 3 + [(1, 9, 17)] * 2
    items = [item(rng, *s) for s in shapes]
    outs = list(g.map(items))
    assert len(outs) == len(items)
    for out, it in zip(outs, items):
        assert out["r"].device == "cpu"
        close(out["r"].numpy(), reference(cpu_conv, it))
    st = g.stats()["map"]
    # The first A and the first B run eagerly; every other item is one launch,
    # and each run of one shape ends with 2 launches that drain it.
    assert st["eager"] == 2
    assert st["launches"] == (3 + 2) + (3 + 2) + (2 + 2)
    # Every range of the 3 stages ([0,0] .. [2,2]: 6) captured once per shape.
    assert st["captures"] == st["graphs"] == 2 * 6
    # Device items give device results, ready by their events.
    dev_items = [{"x": t["x"], "q": t["q"]} for t in items[:3]]
    ident = {k: twinfer.load(make_model([helper.make_node("Identity", ["a"], ["b"])], [("a", F32, list(v.shape))],
                                         [("b", F32, list(v.shape))]), device=gpu) for k, v in dev_items[0].items()}
    on_device = [{k: ident[k].run({"a": v}, outputs="device")["b"] for k, v in t.items()} for t in dev_items]
    for out, it in zip(g.map(on_device), dev_items):
        assert out["r"].device.startswith(gpu)
        close(out["r"].numpy(), reference(cpu_conv, it))
    pipe.close()


def test_random_stream_delays_never_change_mapped_results(models, rng):
    """Many seeds of the simulated device's random delays with its race
    detector on: a delay-line copy ordered wrongly against the stage that
    reads it (or a stage reading this launch's value instead of the one its
    item made) fails here."""
    cpu_conv = twinfer.load(models["conv"], device="cpu")
    items = [item(rng, 2, 10, 12) for _ in range(7)]
    want = [reference(cpu_conv, it) for it in items]
    for seed in range(1, 7):
        with sim_options(seed=seed, max_delay_us=300):
            pipe = three_stages(models, "sim")
            g = pipe.graphed()
            for _ in range(2):
                for out, w in zip(g.map(items), want, strict=True):
                    close(out["r"].numpy(), w)
            pipe.close()


@pytest.fixture
def on_sim(models):
    """The CPU's conv (for references), the three stages on the simulated device, their graphed form."""
    pipe = three_stages(models, "sim")
    yield twinfer.load(models["conv"], device="cpu"), pipe, pipe.graphed()
    pipe.close()


def test_a_map_stopped_early_leaves_nothing_in_flight(on_sim, rng):
    cpu_conv, _, g = on_sim
    items = [item(rng, 1, 12, 12) for _ in range(6)]
    gen = g.map(items)
    for it in items[:3]:
        close(next(gen)["r"].numpy(), reference(cpu_conv, it))
    gen.close()
    assert g.stats()["map"]["launches"] > 0
    # A new map starts afresh with the same graphs; run() in between stays right.
    close(g.run(items[5])["r"].numpy(), reference(cpu_conv, items[5]))
    for out, it in zip(g.map(items[3:]), items[3:], strict=True):
        close(out["r"].numpy(), reference(cpu_conv, it))


def test_two_maps_at_once_and_a_bad_item(on_sim, rng):
    cpu_conv, pipe, g = on_sim
    a = [item(rng, 2, 9, 9) for _ in range(5)]
    b = [item(rng, 1, 14, 10) for _ in range(5)]
    # Interleaved maps each get their own delay lines; the stages' contexts are shared.
    for oa, ob, ia, ib in zip(g.map(a), g.map(b), a, b, strict=True):
        close(oa["r"].numpy(), reference(cpu_conv, ia))
        close(ob["r"].numpy(), reference(cpu_conv, ib))
    # An item that fails raises at its turn, after the results of the items before it:
    # one missing an input (refused in Python), one whose shapes no stage takes (refused
    # by its eager run, after the new shapes drained the items in flight).
    for bad_item, error in (({"x": a[2]["x"]}, "missing input"),
                            ({"x": a[2]["x"][0], "q": a[2]["q"]}, "rank|shape|dims")):
        got = []
        with pytest.raises(twinfer.Error, match=error):
            for out in g.map(a[:2] + [bad_item] + a[3:]):
                got.append(out["r"].numpy())
        assert len(got) == 2
        for r, it in zip(got, a):
            close(r, reference(cpu_conv, it))
        assert all(p.stats()["in_flight"] == 0 for p in g._pipes)
    for out, it in zip(g.map(a), a, strict=True):
        close(out["r"].numpy(), reference(cpu_conv, it))
    pipe.close()
    with pytest.raises(twinfer.Error, match="closed"):
        list(g.map(a))


def reshape_then_scale():
    """y = Reshape(x, s) * 2: `s` keys the plan by its value."""
    nodes = [helper.make_node("Reshape", ["x", "s"], ["r"]),
             helper.make_node("Mul", ["r", "two"], ["y"])]
    return make_model(nodes, [("x", F32, [12]), ("s", np.int64, [2])], [("y", F32, ["A", "B"])],
                      [("two", np.array(2, F32))])


def plus_one():
    return make_model([helper.make_node("Add", ["y_in", "one"], ["z"])], [("y_in", F32, ["A", "B"])],
                      [("z", F32, ["A", "B"])], [("one", np.array(1, F32))])


@pytest.mark.parametrize("gpu", GPUS)
def test_a_keyed_input_changing_value_drains_and_keys_the_graphs(rng, gpu):
    first, second = twinfer.load(reshape_then_scale(), device=gpu), twinfer.load(plus_one(), device=gpu)
    pipe = twinfer.Pipeline([first, second], links={"y_in": "y"})
    g = pipe.graphed()
    shapes = [[3, 4], [3, 4], [3, 4], [2, 6], [2, 6], [3, 4], [4, 3]]
    items = [{"x": rng.standard_normal(12).astype(F32), "s": np.array(s, np.int64)} for s in shapes]
    outs = list(g.map(items))
    for out, it in zip(outs, items, strict=True):
        assert out["z"].shape == tuple(it["s"])
        close(out["z"].numpy(), it["x"].reshape(it["s"]) * 2 + 1)
    assert g.stats()["map"]["eager"] == 3  # [3, 4], [2, 6], [4, 3] first seen
    pipe.close()


@pytest.mark.parametrize("gpu", GPUS)
def test_a_kernel_error_in_a_replay_surfaces_when_a_device_output_is_read(rng, gpu):
    # On a GPU a Gather index out of range sets the context's error flag (a
    # kernel cannot throw); a graph's device outputs carry that flag, so
    # reading one raises, as an engine's own device outputs do (the simulated
    # device's kernels throw, which the read raises too).
    gather = make_model([helper.make_node("Gather", ["d", "i"], ["y"])], [("d", F32, [5, 3]), ("i", np.int64, [2])],
                        [("y", F32, [2, 3])])
    e = twinfer.load(gather, device=gpu)
    ident = twinfer.load(make_model([helper.make_node("Identity", ["a"], ["b"])], [("a", np.int64, [2])],
                                    [("b", np.int64, [2])]), device=gpu)
    d = rng.standard_normal((5, 3)).astype(F32)
    on_device = lambda idx: ident.run({"a": np.array(idx, np.int64)}, outputs="device")["b"]  # noqa: E731
    g = twinfer.Parallel([e]).graphed()
    for idx in ([1, 2], [4, 0], [3, 3]):  # eager, capture, replay
        np.testing.assert_array_equal(g.run([{"d": d, "i": on_device(idx)}])[0]["y"].numpy(), d[idx])
    bad = g.run([{"d": d, "i": on_device([0, 9])}])[0]["y"]
    with pytest.raises(twinfer.Error, match="out of range"):
        bad.numpy()
    np.testing.assert_array_equal(g.run([{"d": d, "i": on_device([2, 1])}])[0]["y"].numpy(), d[[2, 1]])
    # A pipelined map of device items, each output read as it comes (the flag
    # is the context's: it names the first read after the failing launch):
    # the bad item's read raises, the others are right.
    pm = twinfer.Pipeline([e]).graphed()
    indices = ([1, 2], [0, 4], [3, 7], [4, 4])
    for o, i in zip(pm.map({"d": d, "i": on_device(i)} for i in indices), indices, strict=True):
        if max(i) < 5:
            np.testing.assert_array_equal(o["y"].numpy(), d[i])
        else:
            with pytest.raises(twinfer.Error, match="out of range"):
                o["y"].numpy()


def test_a_key_whose_capture_was_refused_is_refused_at_once(rng):
    # NonZero's output shape depends on its input's values: the item runs
    # eagerly, then no graph can hold it, and map says so. Another item with
    # those shapes is refused at once: no eager run and no capture again;
    # other shapes are tried afresh.
    e = twinfer.load(make_model([helper.make_node("NonZero", ["x"], ["y"])], [("x", F32, ["n", 3])],
                                [("y", np.int64, None)]), device="sim")
    g = twinfer.Pipeline([e]).graphed()
    lookups = lambda: e.stats()["plan_hits"] + e.stats()["plan_misses"]  # noqa: E731
    items = [{"x": rng.integers(0, 2, (2, 3)).astype(F32)} for _ in range(3)]
    with pytest.raises(twinfer.InvalidArgumentError, match="cannot be captured.*depend on values"):
        list(g.map(items))
    before = lookups()
    with pytest.raises(twinfer.InvalidArgumentError, match="cannot be captured.*depend on values"):
        list(g.map(items))
    assert lookups() == before
    with pytest.raises(twinfer.InvalidArgumentError, match="cannot be captured"):
        list(g.map([{"x": np.ones((4, 3), F32)}]))
    assert lookups() > before
