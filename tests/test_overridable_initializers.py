"""Initializers that a model also lists as graph inputs (ONNX IR >= 4: an
overridable default, as older exporters wrote every weight). twinfer folds
them in as constants; ``override_initializers=`` makes them inputs with their
value as the default. onnxruntime, which keeps them overridable, is the
reference."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import twinfer

vi = helper.make_tensor_value_info


def _conv_with_weights_as_inputs(rng):
    """Conv + bias + Relu whose weight and bias are initializers listed as
    inputs too (torch.onnx.export(keep_initializers_as_inputs=True))."""
    w = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    g = helper.make_graph(nodes, "g", [vi("x", T.FLOAT, [2, 3, 7, 9]), vi("w", T.FLOAT, [5, 3, 3, 3]),
                                       vi("b", T.FLOAT, [5])],
                          [vi("y", T.FLOAT, None)], [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def _ort(model: bytes, feeds: dict) -> np.ndarray:
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def test_they_are_folded_by_default_and_feeding_one_says_how(rng):
    model = _conv_with_weights_as_inputs(rng)
    x = rng.standard_normal((2, 3, 7, 9)).astype(np.float32)
    e = twinfer.load(model, device="cpu")
    assert [s.name for s in e.inputs] == ["x"]
    assert [(s.name, s.shape) for s in e.overridable_initializers] == [("w", (5, 3, 3, 3)), ("b", (5,))]
    np.testing.assert_allclose(e.run({"x": x})["y"].numpy(), _ort(model, {"x": x}), rtol=1e-4, atol=1e-5)
    with pytest.raises(twinfer.InvalidArgumentError, match=r"override_initializers=\['w'\]"):
        e.run({"x": x, "w": np.zeros((5, 3, 3, 3), np.float32)})


@pytest.mark.parametrize("device", ["cpu", "sim"])
@pytest.mark.parametrize("override", [True, ["w"]])
def test_overridden_initializers_take_fed_values_and_default_to_their_own(rng, device, override):
    model = _conv_with_weights_as_inputs(rng)
    e = twinfer.load(model, device=device, override_initializers=override)
    made_inputs = ["w", "b"] if override is True else ["w"]
    assert [s.name for s in e.inputs] == ["x"] + made_inputs
    assert sorted(e.input_defaults) == sorted(made_inputs)
    assert [s.name for s in e.overridable_initializers] == ([] if override is True else ["b"])
    for _ in range(2):  # fresh data each time: the fed weights are read per run
        x = rng.standard_normal((2, 3, 7, 9)).astype(np.float32)
        w = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
        np.testing.assert_allclose(e.run({"x": x})["y"].numpy(), _ort(model, {"x": x}), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(e.run({"x": x, "w": w})["y"].numpy(), _ort(model, {"x": x, "w": w}),
                                   rtol=1e-4, atol=1e-5)
        # Positionally, the defaulted inputs may be left out.
        np.testing.assert_allclose(e(x).numpy(), _ort(model, {"x": x}), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(e(x, w).numpy(), _ort(model, {"x": x, "w": w}), rtol=1e-4, atol=1e-5)


def test_a_subgraph_reading_an_overridden_initializer_sees_the_fed_value(rng):
    # The If's branch reads "w" from the outer scope: overriding it must reach
    # the branch too, not only the main graph's nodes.
    w = rng.standard_normal(4).astype(np.float32)
    then_g = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["t"])], "then", [], [vi("t", T.FLOAT, [4])])
    else_g = helper.make_graph([helper.make_node("Sub", ["x", "w"], ["f"])], "else", [], [vi("f", T.FLOAT, [4])])
    g = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)], "g",
                          [vi("x", T.FLOAT, [4]), vi("c", T.BOOL, []), vi("w", T.FLOAT, [4])],
                          [vi("y", T.FLOAT, [4])], [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    model = m.SerializeToString()
    e = twinfer.load(model, override_initializers=["w"])
    x, w2 = rng.standard_normal(4).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    for c in (True, False):
        for feeds in ({"x": x, "c": np.array(c)}, {"x": x, "c": np.array(c), "w": w2}):
            np.testing.assert_allclose(e.run(feeds)["y"].numpy(), _ort(model, feeds), rtol=1e-6)


def test_a_saved_engine_keeps_the_defaults_and_the_folded_list(rng, tmp_path):
    model = _conv_with_weights_as_inputs(rng)
    x = rng.standard_normal((2, 3, 7, 9)).astype(np.float32)
    w = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    twinfer.load(model, override_initializers=["w"]).save(tmp_path / "e.twinfer")
    e = twinfer.load(tmp_path / "e.twinfer")
    assert [s.name for s in e.inputs] == ["x", "w"]
    assert [s.name for s in e.overridable_initializers] == ["b"]
    np.testing.assert_allclose(e.run({"x": x})["y"].numpy(), _ort(model, {"x": x}), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(e.run({"x": x, "w": w})["y"].numpy(), _ort(model, {"x": x, "w": w}),
                               rtol=1e-4, atol=1e-5)
    with pytest.raises(twinfer.InvalidArgumentError, match="folds it in as a constant"):
        e.run({"x": x, "b": np.zeros(5, np.float32)})


def test_bad_override_names_are_refused(rng):
    model = _conv_with_weights_as_inputs(rng)
    with pytest.raises(twinfer.InvalidArgumentError, match="'q' is not an initializer the model also lists"):
        twinfer.load(model, override_initializers=["q"])
    with pytest.raises(twinfer.InvalidArgumentError, match="override_initializers must be"):
        twinfer.load(model, override_initializers="w")
    # A plain initializer (not listed as an input) is not overridable.
    g = helper.make_graph([helper.make_node("Add", ["x", "k"], ["y"])], "g", [vi("x", T.FLOAT, [2])],
                          [vi("y", T.FLOAT, [2])], [numpy_helper.from_array(np.ones(2, np.float32), "k")])
    with pytest.raises(twinfer.InvalidArgumentError, match="it has none"):
        twinfer.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), override_initializers=["k"])


def _scale_model(rng):
    """y = x * w, w [4] an initializer listed as an input too."""
    w = rng.standard_normal(4).astype(np.float32)
    g = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["y"])], "g",
                          [vi("x", T.FLOAT, ["n", 4]), vi("w", T.FLOAT, [4])], [vi("y", T.FLOAT, ["n", 4])],
                          [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString(), w


def test_defaults_reach_the_batcher_pipelines_and_reports(rng):
    # The paths that build feeds from engine.inputs: a request, a later
    # pipeline stage, a dict of shapes need not name an input with a default.
    model, w = _scale_model(rng)
    e = twinfer.load(model, override_initializers=True)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    with twinfer.Batcher(e, max_batch_size=8) as b:
        np.testing.assert_allclose(b.run({"x": x})["y"], x * w, rtol=1e-6)
    first = twinfer.load(model)  # a plain stage feeding one with a default
    pipe = twinfer.Pipeline([first, e], links={"x": "y"})
    np.testing.assert_allclose(pipe.run({"x": x})["y"].numpy(), x * w * w, rtol=1e-6)
    w2 = rng.standard_normal(4).astype(np.float32)  # the item may still override it
    np.testing.assert_allclose(pipe.run({"x": x, "w": w2})["y"].numpy(), x * w * w2, rtol=1e-6)
    assert e.memory_report({"x": (3, 4)})["arena_bytes"] >= 0


def test_defaults_in_graphed_groups_on_the_simulated_device(rng):
    model, w = _scale_model(rng)
    e = twinfer.load(model, device="sim", override_initializers=True)
    x = rng.standard_normal((2, 4)).astype(np.float32)
    par = twinfer.Parallel([e, e]).graphed()
    for out in par.run([{"x": x}, {"x": x + 1}]):
        assert out["y"].numpy().shape == (2, 4)
    outs = par.run([{"x": x}, {"x": x + 1}])
    np.testing.assert_allclose(outs[0]["y"].numpy(), x * w, rtol=1e-6)
    np.testing.assert_allclose(outs[1]["y"].numpy(), (x + 1) * w, rtol=1e-6)
    pipe = twinfer.Pipeline([e, e], links={"x": "y"}).graphed()
    np.testing.assert_allclose(pipe.run({"x": x})["y"].numpy(), x * w * w, rtol=1e-6)


def test_a_graphed_pipeline_refuses_stages_with_different_defaults_for_one_name(rng):
    # A graphed pipeline has one item slot per input name: stage 2 got stage
    # 1's default for "w" when the item left it out.
    (m1, w1), (m2, w2) = _scale_model(rng), _scale_model(rng)
    e1 = twinfer.load(m1, device="sim", override_initializers=True)
    e2 = twinfer.load(m2, device="sim", override_initializers=True)
    pipe = twinfer.Pipeline([e1, e2], links={"x": "y"})
    x = rng.standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_allclose(pipe.run({"x": x})["y"].numpy(), x * w1 * w2, rtol=1e-6)  # eager: each its own
    with pytest.raises(twinfer.InvalidArgumentError, match="different defaults for input 'w'"):
        pipe.graphed().run({"x": x})
    w = rng.standard_normal(4).astype(np.float32)  # given in the item, one value for both
    np.testing.assert_allclose(pipe.graphed().run({"x": x, "w": w})["y"].numpy(), x * w * w, rtol=1e-6)
