"""What real models declare, or leave out, that ONNX allows and onnxruntime
runs (issue 15): subgraph outputs with no type (the PyTorch exporter's If
bodies), If branches that cannot take the inputs at hand (the branch not
taken), and dim_params that mean "unknown" rather than naming a dim."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import twinfer
from onnx_helpers import run_ort


def _untyped(name):
    """An output declared with an empty TypeProto (`type {}`), as exporters write."""
    vi = onnx.ValueInfoProto()
    vi.name = name
    vi.type.SetInParent()
    return vi


def _vi(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes, inputs, outputs, inits=None, opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 10)
    return model


def _check(model, feeds, device="cpu"):
    engine = twinfer.load(model, device=device)
    got = engine.run(feeds)
    for out, want in zip(model.graph.output, run_ort(model, feeds)):
        have = got[out.name].numpy()
        assert have.dtype == want.dtype and have.shape == want.shape, (out.name, have.dtype, have.shape, want.shape)
        np.testing.assert_allclose(have, want, rtol=1e-6, atol=1e-6, err_msg=out.name)
    return engine


def test_if_branches_with_untyped_outputs(rng, device):
    then_g = helper.make_graph([helper.make_node("Unsqueeze", ["x", "zero"], ["t"])], "then", [], [_untyped("t")],
                               [numpy_helper.from_array(np.array([0], np.int64), "zero")])
    else_g = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["sq"]),
                                helper.make_node("Unsqueeze", ["sq", "zero_e"], ["e"])], "else", [], [_untyped("e")],
                               [numpy_helper.from_array(np.array([0], np.int64), "zero_e")])
    model = _model([helper.make_node("If", ["c"], ["out"], then_branch=then_g, else_branch=else_g)],
                   [_vi("c", [], TensorProto.BOOL), _vi("x", ["n", 3])], [_vi("out", None)])
    x = rng.standard_normal((4, 3)).astype(np.float32)
    for c in (True, False):
        _check(model, {"c": np.array(c), "x": x}, device)


@pytest.mark.parametrize("trips", [3, 0])
def test_loop_body_with_untyped_outputs(rng, trips):
    """Carried and scan outputs left untyped; with zero trips the empty scan
    output still comes out float32, as inference typed it."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Add", ["acc", "step"], ["acc_out"]),
         helper.make_node("Mul", ["acc_out", "two"], ["scan_out"])],
        "body", [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL), _untyped("acc")],
        [_untyped("cond_out"), _untyped("acc_out"), _untyped("scan_out")],
        [numpy_helper.from_array(np.array(2.0, np.float32), "two")])
    model = _model([helper.make_node("Loop", ["m", "", "acc0"], ["acc", "scans"], body=body)],
                   [_vi("m", [], TensorProto.INT64), _vi("acc0", [5]), _vi("step", [5])],
                   [_vi("acc", None), _vi("scans", None)])
    feeds = {"m": np.array(trips, np.int64), "acc0": rng.standard_normal(5).astype(np.float32),
             "step": rng.standard_normal(5).astype(np.float32)}
    engine = twinfer.load(model, device="cpu")
    got = engine.run(feeds)
    want = run_ort(model, feeds)
    np.testing.assert_allclose(got["acc"].numpy(), want[0], rtol=1e-6)
    scans = got["scans"].numpy()
    assert scans.dtype == np.float32 and scans.shape[0] == want[1].shape[0] == trips
    if trips:
        np.testing.assert_allclose(scans, want[1], rtol=1e-6)


def test_scan_body_with_untyped_outputs(rng):
    body = helper.make_graph([helper.make_node("Add", ["s", "x_t"], ["s_out"]),
                              helper.make_node("Identity", ["s_out"], ["y_t"])], "body",
                             [_untyped("s"), _untyped("x_t")], [_untyped("s_out"), _untyped("y_t")])
    model = _model([helper.make_node("Scan", ["s0", "xs"], ["s", "ys"], body=body, num_scan_inputs=1)],
                   [_vi("s0", [3]), _vi("xs", [6, 3])], [_vi("s", None), _vi("ys", None)], opset=16)
    _check(model, {"s0": rng.standard_normal(3).astype(np.float32),
                   "xs": rng.standard_normal((6, 3)).astype(np.float32)})


def test_a_model_input_must_declare_its_type():
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_untyped("x")], [_vi("y", None)])
    with pytest.raises(twinfer.ModelFormatError, match="'x' declares no type"):
        twinfer.load(model, device="cpu")


def _if_with_a_branch_for_other_shapes():
    """then: x reshaped to [-1, 4] (fine for any x with a multiple of 4
    elements); else: x reshaped to [3, 5] (only for 15-element inputs). Fed
    [2, 4], inference of the else branch fails; it is not the branch taken."""
    def branch(name, shape):
        return helper.make_graph([helper.make_node("Reshape", ["x", f"{name}_shape"], [f"{name}_y"])], name, [],
                                 [_untyped(f"{name}_y")],
                                 [numpy_helper.from_array(np.array(shape, np.int64), f"{name}_shape")])
    return _model([helper.make_node("If", ["c"], ["out"], then_branch=branch("then", [-1, 4]),
                                    else_branch=branch("else", [3, 5]))],
                  [_vi("c", [], TensorProto.BOOL), _vi("x", [2, 4])], [_vi("out", None)])


def test_if_branch_that_cannot_take_these_shapes_is_not_an_error_until_taken(rng, device):
    model = _if_with_a_branch_for_other_shapes()
    x = rng.standard_normal((2, 4)).astype(np.float32)
    engine = _check(model, {"c": np.array(True), "x": x}, device)
    with pytest.raises(twinfer.ShapeError):  # onnxruntime fails on this branch too
        engine.run({"c": np.array(False), "x": x})
    np.testing.assert_array_equal(engine.run({"c": np.array(True), "x": x})["out"].numpy(), x)  # still usable


def test_question_mark_dims_are_anonymous(rng):
    """Paddle's classifiers declare [-1, 3, '?', '?'] and take 48 x 192 images."""
    model = _model([helper.make_node("ReduceMean", ["x"], ["y"], axes=[2, 3], keepdims=0)],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3, "?", "?"])], [_vi("y", None)],
                   opset=13)
    _check(model, {"x": rng.standard_normal((2, 3, 48, 192)).astype(np.float32)})


def test_a_named_dim_repeated_still_means_equal_dims(rng):
    model = _model([helper.make_node("Add", ["a", "b"], ["y"])], [_vi("a", ["n", 4]), _vi("b", ["n", 4])],
                   [_vi("y", None)])
    engine = twinfer.load(model, device="cpu")
    with pytest.raises(twinfer.ShapeError, match="dim 'n'"):
        engine.run({"a": np.zeros((2, 4), np.float32), "b": np.zeros((3, 4), np.float32)})


def test_inputs_that_disagree_with_a_shared_dim_name_run_as_onnxruntime_runs_them(rng):
    # Both inputs name their first dim "n", but the graph never needs them
    # equal: onnxruntime runs any lengths, and so does twinfer.
    model = _model([helper.make_node("ReduceSum", ["a"], ["sa"], keepdims=1),
                    helper.make_node("ReduceSum", ["b"], ["sb"], keepdims=1),
                    helper.make_node("Concat", ["sa", "sb"], ["y"], axis=0)],
                   [_vi("a", ["n", 3]), _vi("b", ["n", 3])], [_vi("y", [2, 1])])
    _check(model, {"a": rng.standard_normal((2, 3)).astype(np.float32),
                   "b": rng.standard_normal((5, 3)).astype(np.float32)})


def test_when_such_inputs_then_do_not_fit_the_error_names_the_dims():
    model = _model([helper.make_node("Add", ["a", "b"], ["c"])], [_vi("a", ["n", 3]), _vi("b", ["n", 3])],
                   [_vi("c", ["n", 3])])
    e = twinfer.load(model, device="cpu")
    with pytest.raises(twinfer.ShapeError, match="dim 'n' is 2 in input 'a' but 4 in input 'b'"):
        e.run({"a": np.zeros((2, 3), np.float32), "b": np.zeros((4, 3), np.float32)})
    np.testing.assert_array_equal(e.run({"a": np.ones((3, 3), np.float32), "b": np.ones((3, 3), np.float32)})["c"]
                                  .numpy(), np.full((3, 3), 2, np.float32))


@pytest.mark.parametrize("device", ["cpu", "sim"])
def test_an_input_declared_without_a_shape_takes_any_rank(device):
    # A TypeProto.Tensor with no shape field is "rank unknown", not a scalar:
    # it was refused as "expects rank 0" for every non-scalar feed.
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, None)
    assert not x.type.tensor_type.HasField("shape")
    model = _model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("ReduceSum", ["r"], ["y"], keepdims=0)],
                   [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    engine = twinfer.load(model, device=device)
    rng = np.random.default_rng(7)
    for shape in [(2, 3), (5,), (), (3, 1, 4), (2, 3)]:  # one engine, plans per rank
        feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
        want = run_ort(model, feeds)[0]
        got = engine.run(feeds)["y"].numpy()
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # The dtype is still checked.
    with pytest.raises(twinfer.DTypeError):
        engine.run({"x": np.ones((2, 2), np.int64)})


def test_a_batcher_over_an_input_declared_without_a_shape():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, None)
    model = _model([helper.make_node("Neg", ["x"], ["y"])], [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    engine = twinfer.load(model, device="cpu")
    with twinfer.Batcher(engine, max_batch_size=0) as b:
        a = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
        np.testing.assert_array_equal(b.run({"x": a})["y"], -a)
    with pytest.raises(twinfer.InvalidArgumentError, match="no declared shape"):
        twinfer.Batcher(engine, max_batch_size=4)
