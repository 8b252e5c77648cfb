"""Zero Pad folded into the following Conv's pads (graph/passes/fold_pad_conv.cc),
checked against onnxruntime on the unfolded model: asymmetric pads, the
opset-18 axes input, a Pad read by two Convs, and the cases that must stay
apart (a non-zero fill, reflect mode, batch/channel padding, another reader)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_helpers import run_ort

import twinfer

F = TensorProto.FLOAT


def pad_conv_model(rng, pads, *, value=None, mode=None, axes=None, opset=17, extra_reader=False, two_convs=False):
    c, k = 5, 3
    inits = {"w": rng.standard_normal((7, c, k, k)).astype(np.float32) * 0.3,
             "b": rng.standard_normal(7).astype(np.float32), "pads": np.int64(pads)}
    pad_inputs = ["x", "pads"]
    if value is not None or axes is not None:
        pad_inputs.append("value" if value is not None else "")
        if value is not None:
            inits["value"] = np.float32(value)
    if axes is not None:
        pad_inputs.append("axes")
        inits["axes"] = np.int64(axes)
    kwargs = {"mode": mode} if mode else {}
    nodes = [helper.make_node("Pad", pad_inputs, ["p"], **kwargs),
             helper.make_node("Conv", ["p", "w", "b"], ["y"], pads=[1, 0, 0, 2], strides=[2, 1])]
    outputs = [helper.make_tensor_value_info("y", F, None)]
    if two_convs:
        nodes.append(helper.make_node("Conv", ["p", "w"], ["y2"], group=1, dilations=[2, 2]))
        outputs.append(helper.make_tensor_value_info("y2", F, None))
    if extra_reader:
        nodes.append(helper.make_node("Relu", ["p"], ["r"]))
        outputs.append(helper.make_tensor_value_info("r", F, None))
    g = helper.make_graph(nodes, "padconv", [helper.make_tensor_value_info("x", F, ["N", c, 9, 11])], outputs,
                          [numpy_helper.from_array(np.asarray(v), n) for n, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


CASES = {  # name: (model kwargs, folded?)
    "symmetric": (dict(pads=[0, 0, 1, 1, 0, 0, 1, 1]), True),
    "asymmetric (TF same)": (dict(pads=[0, 0, 0, 1, 0, 0, 2, 1]), True),
    "explicit zero fill": (dict(pads=[0, 0, 1, 2, 0, 0, 1, 0], value=0.0), True),
    "opset 18 axes": (dict(pads=[2, 1, 0, 3], axes=[2, -1], opset=18), True),
    "two convs read it": (dict(pads=[0, 0, 1, 1, 0, 0, 1, 1], two_convs=True), True),
    "non-zero fill": (dict(pads=[0, 0, 1, 1, 0, 0, 1, 1], value=0.5), False),
    "reflect": (dict(pads=[0, 0, 1, 1, 0, 0, 1, 1], mode="reflect"), False),
    "channel padding": (dict(pads=[0, 1, 1, 1, 0, 0, 1, 1]), False),
    "another reader": (dict(pads=[0, 0, 1, 1, 0, 0, 1, 1], extra_reader=True), False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_pad_folds_into_conv_only_when_exact(rng, case):
    kwargs, folded = CASES[case]
    model = pad_conv_model(rng, **kwargs)
    if "channel" in case:  # padding C from 5 to 6: the Conv takes 6 input channels
        w = rng.standard_normal((7, 6, 3, 3)).astype(np.float32) * 0.3
        model.graph.initializer[0].CopyFrom(numpy_helper.from_array(w, "w"))
    engine = twinfer.load(model.SerializeToString(), device="cpu")
    passes = engine.stats()["passes"]
    assert any("fold_pad_conv: 1 Pad" in p for p in passes) == folded, passes
    ops = [r.op for r in engine.kernel_report({"x": (2, 5, 9, 11)})]
    assert ("Pad" not in ops) == folded, ops
    for n in (1, 3):
        x = rng.standard_normal((n, 5, 9, 11)).astype(np.float32)
        got = engine.run({"x": x})
        want = run_ort(model, {"x": x})
        for (name, t), w in zip(got.items(), want):
            np.testing.assert_allclose(t.numpy(), w, rtol=1e-4, atol=1e-5, err_msg=name)
