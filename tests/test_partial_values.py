"""Shape arithmetic on dims known in part (graph/passes/partial_values.h):
with the batch symbolic, the exporters' Shape -> Gather -> Mul -> Concat ->
Reshape chain used to leave every dim after the Reshape unknown; now the
dims that do not depend on the batch are known at load and what is known
whole folds. Answers against onnxruntime at several batch sizes; what is
known at load read from the engine's output specs and op histogram."""

import numpy as np
import pytest
from onnx import helper, numpy_helper

import twinfer
from onnx_helpers import make_model, run_ort_named


def _model(rng):
    # x [b, 3, 4]: flat = Reshape(x, [b, 3 * 4]) with the target computed from
    # Shape(x); a bias expanded to Where(target == 0, 1, target) (the
    # exporters' mask pattern); then a MatMul. Also an int output: the
    # target's last element minus the batch (known only at run time).
    c = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    w = numpy_helper.from_array(rng.standard_normal((12, 5)).astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.standard_normal((1, 12)).astype(np.float32), "bias")
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["b"], axis=0),
        helper.make_node("Gather", ["s", "i1"], ["d1"], axis=0),
        helper.make_node("Gather", ["s", "i2"], ["d2"], axis=0),
        helper.make_node("Mul", ["d1", "d2"], ["prod"]),
        helper.make_node("Unsqueeze", ["b", "ax0"], ["b1"]),
        helper.make_node("Unsqueeze", ["prod", "ax0"], ["prod1"]),
        helper.make_node("Concat", ["b1", "prod1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"]),
        helper.make_node("Equal", ["target", "zero"], ["is0"]),
        helper.make_node("Where", ["is0", "ones", "target"], ["tgt"]),
        helper.make_node("Expand", ["bias", "tgt"], ["bias_b"]),
        helper.make_node("Add", ["flat", "bias_b"], ["h"]),
        helper.make_node("MatMul", ["h", "w"], ["y"]),
        helper.make_node("Slice", ["target", "m1", "big"], ["last"]),
        helper.make_node("Sub", ["last", "b1"], ["k"]),
    ]
    inits = [c("i0", 0), c("i1", 1), c("i2", 2), c("ax0", [0]), c("zero", 0), c("ones", [1, 1]),
             c("m1", [-1]), c("big", [9]), w, bias]
    outputs = [("flat", np.float32, None), ("y", np.float32, None), ("k", np.int64, None)]
    return make_model(nodes, [("x", np.float32, ["b", 3, 4])], outputs, inits, name="partial")


@pytest.mark.parametrize("device", ["cpu", "sim"])
def test_dims_known_in_part_are_known_at_load(device, rng):
    m = _model(rng)
    e = twinfer.load(m.SerializeToString(), device=device)
    specs = {s.name: list(s.shape) for s in e.outputs}
    # The batch stays a symbol (or unknown); 3 * 4 is known without it.
    assert specs["flat"][1] == 12 and specs["y"][1] == 5, specs
    assert specs["k"] == [1], specs
    ops = e.op_histogram()
    # Gather of dims 1 and 2 and their Mul folded; the batch's Gather stays.
    assert ops.get("Gather", 0) == 1 and "Mul" not in ops, ops
    for b in (1, 2, 5):
        x = rng.standard_normal((b, 3, 4)).astype(np.float32)
        want = run_ort_named(m, {"x": x})
        got = {k: v.numpy() for k, v in e.run({"x": x}).items()}
        np.testing.assert_allclose(got["flat"], want["flat"], rtol=1e-6)
        np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(got["k"], want["k"])


def test_an_unknown_element_is_never_taken_for_a_known_one(rng):
    # A Where whose condition is unknown picks nothing; a Slice of the
    # batch's element stays unknown; the answers are onnxruntime's at a
    # batch equal to a known dim's value (3) and at others.
    m = _model(rng)
    e = twinfer.load(m.SerializeToString(), device="cpu")
    for b in (3, 12, 4):
        x = rng.standard_normal((b, 3, 4)).astype(np.float32)
        want = run_ort_named(m, {"x": x})
        got = {k: v.numpy() for k, v in e.run({"x": x}).items()}
        np.testing.assert_array_equal(got["k"], want["k"])
        np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-5)
