"""Plans for shapes that keep changing in a few dims (a decoder's past grows
by one token a step) start from the engine's graph with the dims that stayed
bound and their shape arithmetic folded once (graph/passes/fixed_dims.h).
The answers must not depend on it: every step against onnxruntime, with the
dims changing in turn, back to a cached shape, and on an Optimum decoder."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import PLAN_DEVICES, load_on
from merged_decoder import MERGED_DECODER, greedy_steps_against_onnxruntime
from onnx_helpers import make_model, run_ort_named



@pytest.fixture(params=PLAN_DEVICES)
def device(request):
    return request.param


def _growing_past_model():
    # A decoder's shape arithmetic in small: the past and the new tokens
    # concatenated, flattened by a target computed from Shape (batch from
    # one input, the rest from the concatenation), a position ramp as long
    # as the flattened row, and an int output mixing a dim that stays (the
    # new tokens) with one that grows (the past).
    c = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    nodes = [
        helper.make_node("Concat", ["past", "x"], ["cat"], axis=1),
        helper.make_node("Shape", ["cat"], ["s"]),
        helper.make_node("Shape", ["x"], ["sx"]),
        helper.make_node("Shape", ["past"], ["sp"]),
        helper.make_node("Gather", ["sx", "i0"], ["b"], axis=0),
        helper.make_node("Gather", ["s", "i1"], ["n"], axis=0),
        helper.make_node("Gather", ["s", "i2"], ["c"], axis=0),
        helper.make_node("Mul", ["n", "c"], ["nc"]),
        helper.make_node("Unsqueeze", ["b", "ax0"], ["b1"]),
        helper.make_node("Unsqueeze", ["nc", "ax0"], ["nc1"]),
        helper.make_node("Concat", ["b1", "nc1"], ["target"], axis=0),
        helper.make_node("Reshape", ["cat", "target"], ["flat"]),
        helper.make_node("Range", ["zero", "nc", "one"], ["ramp"]),
        helper.make_node("Cast", ["ramp"], ["rampf"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["flat", "rampf"], ["y"]),
        helper.make_node("Gather", ["sx", "i1"], ["t"], axis=0),
        helper.make_node("Gather", ["sp", "i1"], ["p"], axis=0),
        helper.make_node("Mul", ["t", "p"], ["tp"]),
        helper.make_node("Add", ["tp", "b"], ["z"]),
    ]
    inits = [c("i0", 0), c("i1", 1), c("i2", 2), c("ax0", [0]), c("zero", 0), c("one", 1)]
    inputs = [("x", np.float32, ["batch", "tokens", 3]), ("past", np.float32, ["batch", "past_len", 3])]
    return make_model(nodes, inputs, [("y", np.float32, None), ("z", np.int64, None)], inits, name="growing_past")


# (batch, tokens, past): the past grows, then the batch changes, then the
# new tokens, then a shape seen before (its plan is cached), then new ones.
STEPS = [(2, 1, 0), (2, 1, 1), (2, 1, 2), (2, 1, 5), (3, 1, 5), (3, 2, 6), (2, 1, 1), (3, 1, 9), (3, 1, 10)]


def test_changing_dims_plan_from_the_bound_graph(device, rng):
    m = _growing_past_model()
    e = load_on(m.SerializeToString(), device)
    for b, t, p in STEPS:
        feeds = {"x": rng.standard_normal((b, t, 3)).astype(np.float32),
                 "past": rng.standard_normal((b, p, 3)).astype(np.float32)}
        want = run_ort_named(m, feeds)
        got = {k: v.numpy() for k, v in e.run(feeds).items()}
        np.testing.assert_allclose(got["y"], want["y"], rtol=1e-6, err_msg=str((b, t, p)))
        np.testing.assert_array_equal(got["z"], want["z"], err_msg=str((b, t, p)))
    s = e.stats()
    # Bound graphs: past changing (batch 2, 1 token), then batch and past
    # (1 token), then all three; each built once, when its dims first moved.
    assert s["fixed_dims_graphs"] == 3, s
    assert s["plan_misses"] == len(STEPS) - 1, s


def test_one_shape_after_another_binds_nothing(rng):
    # Shapes that never change (or a first plan) build no bound graph.
    m = _growing_past_model()
    e = load_on(m.SerializeToString(), "cpu")
    feeds = {"x": np.ones((2, 1, 3), np.float32), "past": np.ones((2, 4, 3), np.float32)}
    for _ in range(3):
        e.run(feeds)
    assert e.stats()["fixed_dims_graphs"] == 0


@pytest.mark.parametrize("device", ["cpu", "sim"])
def test_an_optimum_decoder_binds_all_but_the_past(device, rng):
    # Greedy steps of the merged GPT-2 (If on use_cache_branch): from the
    # second step with past on, only the past's and the mask's lengths
    # change, so one bound graph serves every later step; each step's
    # outputs are onnxruntime's.
    e = load_on(str(MERGED_DECODER), device)
    greedy_steps_against_onnxruntime(e, rng, steps=8, prompt=4)
    assert e.stats()["fixed_dims_graphs"] == 1, e.stats()


def test_reports_at_shapes_that_do_not_fit_the_inputs_are_errors(rng):
    # memory_report and kernel_report take shapes, not tensors: a list of the
    # wrong length or rank is a clear error (a short list used to crash the
    # interpreter), also once some dims have been changing.
    import twinfer

    e = load_on(_growing_past_model().SerializeToString(), "cpu")
    for p in (4, 5):
        e.memory_report([[2, 1, 3], [2, p, 3]])
    assert e.stats()["fixed_dims_graphs"] == 1
    with pytest.raises(twinfer.InvalidArgumentError, match="2 inputs"):
        e.memory_report([[2, 1, 3]])
    with pytest.raises(twinfer.ShapeError, match="rank 3"):
        e.memory_report([[2, 1, 3, 7], [2, 5, 3]])
    with pytest.raises(twinfer.ShapeError, match="dim 2"):
        e.kernel_report([[2, 1, 4], [2, 5, 3]])
    with pytest.raises(twinfer.InvalidArgumentError, match="'past'"):
        e.memory_report({"x": (2, 1, 3)})
    with pytest.raises(twinfer.InvalidArgumentError, match="lists of ints"):
        e.memory_report([["2", 1, 3], [2, 5, 3]])
    with pytest.raises(twinfer.ShapeError, match="negative"):
        e.memory_report([[2, -1, 3], [2, 5, 3]])
    x = rng.standard_normal((2, 1, 3)).astype(np.float32)
    past = rng.standard_normal((2, 6, 3)).astype(np.float32)
    want = run_ort_named(_growing_past_model(), {"x": x, "past": past})
    np.testing.assert_allclose(e.run({"x": x, "past": past})["y"].numpy(), want["y"], rtol=1e-6)


def test_without_optimize_nothing_is_bound(rng):
    m = _growing_past_model()
    e = load_on(m.SerializeToString(), "cpu", optimize=False)
    for p in (1, 2, 3):
        feeds = {"x": rng.standard_normal((2, 1, 3)).astype(np.float32),
                 "past": rng.standard_normal((2, p, 3)).astype(np.float32)}
        np.testing.assert_allclose(e.run(feeds)["y"].numpy(), run_ort_named(m, feeds)["y"], rtol=1e-6)
    assert e.stats()["fixed_dims_graphs"] == 0
