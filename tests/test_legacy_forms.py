"""Old-opset forms (graph/passes/legacy_forms.cc). Reshape before opset 5
takes its shape as an attribute (refused as "required input 1 is missing").
Before opset 7 a binary op broadcasts only with broadcast=1, and then B
lines up with A from dim `axis` on (B [3] with axis=0 on A [3, 3] is a column;
from opset 7 B lines up with A's trailing dims). twinfer broadcast from the
trailing dims whatever the axis: silently wrong (graph/passes/legacy_broadcast.cc).
onnxruntime has no kernels for these opsets: checked against NumPy with B
reshaped as the spec says."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import twinfer

F = TensorProto.FLOAT


def _model(op, a_shape, b_shape, axis, opset=6):
    node = helper.make_node(op, ["a", "b"], ["y"], broadcast=1, axis=axis)
    vi = helper.make_tensor_value_info
    g = helper.make_graph([node], "g", [vi("a", F, a_shape), vi("b", F, b_shape)], [vi("y", F, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 3
    return m


@pytest.mark.parametrize("op,fn", [("Add", np.add), ("Mul", np.multiply), ("Sub", np.subtract), ("Div", np.divide)])
@pytest.mark.parametrize("a_shape,b_shape,axis", [((3, 3), (3,), 0), ((2, 3, 4, 5), (3, 4), 1), ((2, 3, 4, 5), (3,), 1),
                                                  ((2, 3, 4, 5), (4, 5), 2), ((2, 3), (2, 3), 0)])
@pytest.mark.parametrize("device", ["cpu", "sim"])
def test_b_lines_up_from_axis(rng, op, fn, a_shape, b_shape, axis, device):
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = (rng.standard_normal(b_shape) + 3).astype(np.float32)
    want = fn(a, b.reshape(b_shape + (1,) * (len(a_shape) - axis - len(b_shape))))
    got = twinfer.load(_model(op, list(a_shape), list(b_shape), axis), device=device).run({"a": a, "b": b})["y"]
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-6)


def test_undeclared_ranks_are_refused_by_name():
    m = _model("Add", None, [3], 0)
    with pytest.raises(twinfer.UnsupportedOpError, match="broadcast=1 with axis .* 'a' has none declared"):
        twinfer.load(m)


def test_opset_7_ignores_the_old_attributes(rng):
    # From opset 7 numpy broadcasting, whatever a stray axis says.
    a, b = rng.standard_normal((3, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    m = helper.make_model(helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["y"])], "g",
        [helper.make_tensor_value_info("a", F, [3, 3]), helper.make_tensor_value_info("b", F, [3])],
        [helper.make_tensor_value_info("y", F, None)]), opset_imports=[helper.make_opsetid("", 7)])
    np.testing.assert_allclose(twinfer.load(m).run({"a": a, "b": b})["y"].numpy(), a + b, rtol=1e-6)


@pytest.mark.parametrize("device", ["cpu", "sim"])
def test_reshape_1_reads_its_shape_attribute(rng, device):
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    g = helper.make_graph([helper.make_node("Reshape", ["x"], ["y"], shape=[0, -1])], "g",
                          [helper.make_tensor_value_info("x", F, [2, 3, 4])], [helper.make_tensor_value_info("y", F, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 4)])
    m.ir_version = 3
    got = twinfer.load(m, device=device).run({"x": x})["y"].numpy()
    np.testing.assert_array_equal(got, x.reshape(2, 12))
