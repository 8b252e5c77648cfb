"""onnxruntime's contrib ops (com.microsoft) that its optimizer and quantizer
leave in the files they save (Kokoro-82M int8, ddddocr's older recogniser):
each is rewritten into standard ops at load (graph/passes/expand_contrib.cc)
and must give onnxruntime's result on a small graph."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import twinfer
from onnx_helpers import contrib_model, run_ort

MS = "com.microsoft"


_model = contrib_model


def _vi(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def _check(model, feeds, rtol=1e-5, atol=1e-5):
    engine = twinfer.load(model, device="cpu")
    assert any("com.microsoft" in line for line in engine.stats()["passes"])
    got = engine.run(feeds)
    for out, want in zip(model.graph.output, run_ort(model, feeds)):
        np.testing.assert_allclose(got[out.name].numpy(), want, rtol=rtol, atol=atol, err_msg=out.name)
    return engine


@pytest.mark.parametrize("op,with_bias", [("FastGelu", True), ("FastGelu", False), ("Gelu", False),
                                          ("BiasGelu", True)])
def test_gelu_family(rng, op, with_bias):
    bias = {"bias": rng.standard_normal(16).astype(np.float32)} if with_bias else {}
    model = _model([helper.make_node(op, ["x"] + list(bias), ["y"], domain=MS)], [_vi("x", ["b", 5, 16])],
                   [_vi("y", None)], bias)
    _check(model, {"x": rng.standard_normal((2, 5, 16)).astype(np.float32) * 3})


@pytest.mark.parametrize("with_beta,with_bias,outputs", [(True, False, 1), (False, True, 4), (True, True, 4)])
def test_skip_layer_normalization(rng, with_beta, with_bias, outputs):
    h = 24
    inits = {"gamma": rng.uniform(0.5, 1.5, h).astype(np.float32)}
    ins = ["x", "skip", "gamma", "beta" if with_beta else "", "bias" if with_bias else ""]
    if with_beta:
        inits["beta"] = rng.standard_normal(h).astype(np.float32)
    if with_bias:
        inits["bias"] = rng.standard_normal(h).astype(np.float32)
    while ins[-1] == "":
        ins.pop()
    names = ["y", "mean", "inv_std", "sum"][:outputs]
    model = _model([helper.make_node("SkipLayerNormalization", ins, names, domain=MS, epsilon=1e-6)],
                   [_vi("x", [2, 7, h]), _vi("skip", [2, 7, h])], [_vi(n, None) for n in names], inits)
    feeds = {"x": rng.standard_normal((2, 7, h)).astype(np.float32),
             "skip": rng.standard_normal((2, 7, h)).astype(np.float32)}
    _check(model, feeds, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("trans_a,trans_b,alpha", [(0, 0, 1.0), (1, 0, 1.0), (0, 1, 0.5), (1, 1, 2.0)])
def test_fused_matmul(rng, trans_a, trans_b, alpha):
    a_shape = (3, 6, 4) if trans_a else (3, 4, 6)
    b_shape = (5, 6) if trans_b else (6, 5)
    model = _model([helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain=MS, transA=trans_a, transB=trans_b,
                                     alpha=alpha)],
                   [_vi("a", list(a_shape)), _vi("b", list(b_shape))], [_vi("y", None)])
    _check(model, {"a": rng.standard_normal(a_shape).astype(np.float32),
                   "b": rng.standard_normal(b_shape).astype(np.float32)}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("direction,per_column", [("forward", False), ("bidirectional", True)])
def test_dynamic_quantize_lstm(rng, direction, per_column):
    """int8 weights [dirs, rows, 4H] with scales per direction or per column.
    onnxruntime also quantizes the activations to 8 bits at each step; twinfer
    runs the LSTM in float on the dequantized weights, so the two differ by
    that rounding: ~1/255 of the activations' range per step, a few 1e-3 on
    outputs bounded by 1 (tanh); 2e-2 bounds it with margin."""
    dirs, hidden, inp, seq, batch = (2 if direction == "bidirectional" else 1), 8, 5, 6, 3
    w = rng.integers(-127, 128, (dirs, inp, 4 * hidden)).astype(np.int8)
    r = rng.integers(-127, 128, (dirs, hidden, 4 * hidden)).astype(np.int8)
    scale_shape = (dirs, 4 * hidden) if per_column else (dirs,)
    inits = {"w": w, "r": r, "b": rng.standard_normal((dirs, 8 * hidden)).astype(np.float32) * 0.1,
             "ws": rng.uniform(0.002, 0.004, scale_shape).astype(np.float32),
             "wz": np.zeros(scale_shape, np.int8),
             "rs": rng.uniform(0.002, 0.004, scale_shape).astype(np.float32),
             "rz": np.zeros(scale_shape, np.int8)}
    node = helper.make_node("DynamicQuantizeLSTM", ["x", "w", "r", "b", "", "", "", "", "ws", "wz", "rs", "rz"],
                            ["y", "y_h", "y_c"], domain=MS, hidden_size=hidden, direction=direction)
    model = _model([node], [_vi("x", [seq, batch, inp])], [_vi("y", None), _vi("y_h", None), _vi("y_c", None)], inits)
    x = rng.standard_normal((seq, batch, inp)).astype(np.float32)
    engine = twinfer.load(model, device="cpu")
    got = engine.run({"x": x})
    for out, want in zip(("y", "y_h", "y_c"), run_ort(model, {"x": x})):
        np.testing.assert_allclose(got[out].numpy(), want, rtol=0, atol=2e-2, err_msg=out)


def test_an_uncovered_form_is_still_reported_as_unsupported():
    model = _model([helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain=MS, transBatchA=1)],
                   [_vi("a", [2, 3, 4]), _vi("b", [4, 5])], [_vi("y", None)])
    with pytest.raises(twinfer.UnsupportedOpError, match="com.microsoft::FusedMatMul"):
        twinfer.load(model, device="cpu")
