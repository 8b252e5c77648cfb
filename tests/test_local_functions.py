"""Model-local functions (ModelProto.functions): the TorchScript exporter's
export_modules_as_functions, onnxscript scripts calling scripts. Each call is
expanded in place; onnxruntime, which runs functions natively, is the
reference, on fresh random data."""
from __future__ import annotations

import io

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import twinfer

vi = helper.make_tensor_value_info
F = T.FLOAT


def _ort(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _check(model, feeds, device="cpu"):
    engine = twinfer.load(model.SerializeToString(), device=device)
    got = engine.run(feeds)
    for out, want in zip(model.graph.output, _ort(model, feeds)):
        np.testing.assert_allclose(got[out.name].numpy(), want, rtol=1e-5, atol=1e-6, err_msg=out.name)
    return engine


def _model(nodes, inputs, outputs, functions, inits=(), opsets=(("", 17), ("local", 1))):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets], functions=functions)
    m.ir_version = 10
    return m


def _scaled_act():
    """local::ScaledAct(x, bias?) -> (y, pre): y = alpha * LeakyRelu(x + bias), with
    alpha and the slope as the call's attributes (slope defaults to 0.1)."""
    slope = helper.make_attribute_ref("alpha", onnx.AttributeProto.FLOAT)
    leaky = helper.make_node("LeakyRelu", ["pre"], ["act"])
    leaky.attribute.append(slope)
    scale = helper.make_node("Constant", [], ["k"])
    scale.attribute.append(helper.make_attribute_ref("value_float", onnx.AttributeProto.FLOAT))
    scale.attribute[0].ref_attr_name = "scale"  # the call's "scale", no default
    fn = helper.make_function("local", "ScaledAct", ["x", "bias"], ["y", "pre"],
                              [helper.make_node("Add", ["x", "bias"], ["pre"]), leaky, scale,
                               helper.make_node("Mul", ["act", "k"], ["y"])],
                              [helper.make_opsetid("", 17)], attributes=["scale"])
    fn.attribute_proto.append(helper.make_attribute("alpha", 0.1))
    return fn


@pytest.mark.parametrize("device", ["cpu", "sim"])
def test_calls_bind_inputs_outputs_and_attributes(device):
    rng = np.random.default_rng(11)
    fn = _scaled_act()
    b = numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "b")
    nodes = [helper.make_node("ScaledAct", ["x", "b"], ["h", "pre1"], domain="local", scale=2.0),  # alpha: default
             helper.make_node("ScaledAct", ["h", "b"], ["y", "pre2"], domain="local", scale=-0.5, alpha=0.3),
             helper.make_node("Add", ["y", "pre1"], ["z"])]
    m = _model(nodes, [vi("x", F, ["n", 5])], [vi("z", F, None), vi("h", F, None)], [fn], [b])
    for n in (3, 1):
        _check(m, {"x": rng.standard_normal((n, 5)).astype(np.float32)}, device)


def test_nested_calls_and_a_function_only_domain():
    # Outer calls Inner twice; Inner uses ai.onnx.ml, which only the function imports.
    inner = helper.make_function("local", "Inner", ["a"], ["b"],
                                 [helper.make_node("Scaler", ["a"], ["s"], domain="ai.onnx.ml", scale=[2.0], offset=[1.0]),
                                  helper.make_node("Tanh", ["s"], ["b"])],
                                 [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    outer = helper.make_function("local", "Outer", ["u"], ["v"],
                                 [helper.make_node("Inner", ["u"], ["t"], domain="local"),
                                  helper.make_node("Inner", ["t"], ["v"], domain="local")],
                                 [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    m = _model([helper.make_node("Outer", ["x"], ["y"], domain="local")], [vi("x", F, [4, 3])], [vi("y", F, None)],
               [outer, inner])
    _check(m, {"x": np.random.default_rng(3).standard_normal((4, 3)).astype(np.float32)})


def test_torchscript_export_modules_as_functions():
    torch = pytest.importorskip("torch")

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(6, 6)
            self.norm = torch.nn.LayerNorm(6)

        def forward(self, x):
            return self.norm(torch.relu(self.lin(x))) + x

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = Block(), Block()

        def forward(self, x):
            return self.b(self.a(x))

    f = io.BytesIO()
    torch.onnx.export(Net().eval(), (torch.randn(3, 6),), f, dynamo=False, export_modules_as_functions={Block},
                      opset_version=17, input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "n"}})
    m = onnx.load_from_string(f.getvalue())
    assert len(m.functions) == 1 and sum(n.op_type == "Block" for n in m.graph.node) == 2
    rng = np.random.default_rng(4)
    for n in (3, 7):
        _check(m, {"x": rng.standard_normal((n, 6)).astype(np.float32)})


def test_functions_twinfer_does_not_expand_are_named():
    x = vi("x", F, [2])
    # A function calling itself.
    loop = helper.make_function("local", "Again", ["a"], ["b"], [helper.make_node("Again", ["a"], ["b"], domain="local")],
                                [helper.make_opsetid("local", 1)])
    with pytest.raises(twinfer.ModelFormatError, match="nest deeper than 32"):
        twinfer.load(_model([helper.make_node("Again", ["x"], ["y"], domain="local")], [x], [vi("y", F, None)],
                            [loop]).SerializeToString())
    # A body with a subgraph.
    branch = helper.make_graph([helper.make_node("Neg", ["a"], ["o"])], "then", [], [vi("o", F, None)])
    with_if = helper.make_function("local", "Cond", ["c", "a"], ["b"],
                                   [helper.make_node("If", ["c"], ["b"], then_branch=branch, else_branch=branch)],
                                   [helper.make_opsetid("", 17)])
    with pytest.raises(twinfer.UnsupportedOpError, match="onnx.inliner.inline_local_functions"):
        twinfer.load(_model([helper.make_node("Cond", ["c", "x"], ["y"], domain="local")],
                            [vi("c", T.BOOL, []), x], [vi("y", F, None)], [with_if]).SerializeToString())
    # Another opset of ai.onnx than the model's.
    old = helper.make_function("local", "Old", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["b"])],
                               [helper.make_opsetid("", 13)])
    with pytest.raises(twinfer.UnsupportedOpError, match="imports ai.onnx opset 13 but the model imports opset 17"):
        twinfer.load(_model([helper.make_node("Old", ["x"], ["y"], domain="local")], [x], [vi("y", F, None)],
                            [old]).SerializeToString())
    # Too many inputs for the function.
    relu = helper.make_function("local", "R", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["b"])],
                                [helper.make_opsetid("", 17)])
    with pytest.raises(twinfer.ModelFormatError, match="calls local function 'R' with 2 inputs"):
        twinfer.load(_model([helper.make_node("R", ["x", "x"], ["y"], domain="local")], [x], [vi("y", F, None)],
                            [relu]).SerializeToString())


def test_expansion_is_bounded_and_unnamed_nodes_stay_unnamed():
    # A chain of functions each calling the next twice doubles per level:
    # 24 levels from a 2 KB file would be 16M nodes (an effective hang).
    fns = [helper.make_function("local", "F0", ["a"], ["b"], [helper.make_node("Neg", ["a"], ["b"])],
                                [helper.make_opsetid("", 17)])]
    for d in range(1, 25):
        fns.append(helper.make_function("local", f"F{d}", ["a"], ["b"],
                                        [helper.make_node(f"F{d - 1}", ["a"], ["t"], domain="local"),
                                         helper.make_node(f"F{d - 1}", ["t"], ["b"], domain="local")],
                                        [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]))
    x = vi("x", F, [2])
    m = _model([helper.make_node("F24", ["x"], ["y"], domain="local")], [x], [vi("y", F, None)], fns)
    with pytest.raises(twinfer.ModelFormatError, match="expand to more than 1048576 nodes"):
        twinfer.load(m.SerializeToString())
    # Four levels: 16 Negs, each unnamed (it was the call's prefix for all).
    m = _model([helper.make_node("F4", ["x"], ["y"], domain="local")], [x], [vi("y", F, None)], fns[:5])
    names = [n for n, _op, _d in twinfer._core.read_model_info(m.SerializeToString(), False, "")["nodes"]]
    assert len(names) == 16 and set(names) == {""}
    np.testing.assert_array_equal(twinfer.load(m.SerializeToString()).run({"x": np.ones(2, np.float32)})["y"].numpy(),
                                  np.ones(2, np.float32))
    # An output that is also an input.
    same = helper.make_function("local", "Same", ["a"], ["a"], [], [helper.make_opsetid("", 17)])
    with pytest.raises(twinfer.ModelFormatError, match="lists 'a' as both an input and an output"):
        twinfer.load(_model([helper.make_node("Same", ["x"], ["y"], domain="local")], [x], [vi("y", F, None)],
                            [same]).SerializeToString())
