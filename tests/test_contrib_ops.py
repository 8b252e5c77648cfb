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


def _sigmoid(v):
    return 1 / (1 + np.exp(-v))


def _quantize_u8(v):
    """DynamicQuantizeLinear's uint8 values (float32 arithmetic, the range
    widened to hold 0, round half to even) less their zero point, and scale."""
    mn, mx = np.float32(min(0, v.min())), np.float32(max(0, v.max()))
    if mx == mn:
        return np.zeros(v.shape, np.int64), np.float32(0)
    scale = np.float32((mx - mn) / np.float32(255))
    zp = np.rint(np.clip(np.float32(0) - mn / scale, 0, 255))
    return np.clip(np.rint(v / scale) + zp, 0, 255).astype(np.int64) - int(zp), scale


def _quantized_lstm_reference(x, w, r, b, ws, rs, wz=0, rz=0):
    """The LSTM of DynamicQuantizeLSTM in NumPy (gates i, o, f, c) as
    onnxruntime computes it: X quantized to uint8 over all its values and
    its projection on W's int8 values, each column times X's scale x W's;
    each step's h R^T on R's int8 values with h quantized to uint8 the same
    way. A nonzero zero point wz / rz instead gives that product in float on
    (q - z) * scale, as twinfer runs it. Returns Y [seq, dirs, batch, H]."""
    dirs, _, gh = w.shape
    hidden, (seq, batch, _) = gh // 4, x.shape
    xq, xs = _quantize_u8(x)
    y = np.zeros((seq, dirs, batch, hidden), np.float32)
    for d in range(dirs):
        if wz:
            xw = x @ ((w[d].astype(np.float32) - wz) * ws[d])
        else:
            xw = (xq @ w[d].astype(np.int64)).astype(np.float32) * (xs * ws[d])  # [seq, batch, 4H]
        rq = r[d].astype(np.int64)            # [H, 4H]
        h = np.zeros((batch, hidden), np.float32)
        c = np.zeros((batch, hidden), np.float32)
        for step in range(seq):
            t = seq - 1 - step if d == 1 else step
            g = xw[t] + b[d, :gh] + b[d, gh:]
            if rz:
                g = g + h @ ((r[d].astype(np.float32) - rz) * rs[d])
            else:
                hq, scale = _quantize_u8(h)
                if scale:
                    g = g + (hq @ rq).astype(np.float32) * scale * rs[d]
            i, o, f, cc = (g[:, k * hidden:(k + 1) * hidden] for k in range(4))
            c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(cc)
            h = (_sigmoid(o) * np.tanh(c)).astype(np.float32)
            y[t, d] = h
    return y


# On AVX-512 VNNI, batches up to 4 run the recurrence in 64-row blocks, 5-8 in
# 32-row ones, larger batches (9) on oneDNN (lstm_int8_recurrence.cc).
@pytest.mark.parametrize("direction,per_column,hidden,batch", [("forward", False, 8, 3), ("bidirectional", True, 8, 3),
                                                               ("bidirectional", False, 67, 2),
                                                               ("bidirectional", True, 67, 1),
                                                               ("bidirectional", True, 67, 6),
                                                               ("forward", False, 33, 9)])
def test_dynamic_quantize_lstm(rng, direction, per_column, hidden, batch):
    """int8 weights [dirs, rows, 4H] with scales per direction or per gate
    column, zero points 0 (onnxruntime's quantizer's output). The CPU kernel
    runs the input projections on W's int8 values with X quantized to uint8
    over all its values, and each step's recurrent product on R's int8
    values with h quantized to uint8, as onnxruntime computes the op.

    A direction's first step has no recurrent product (h starts at 0), so
    there the outputs match onnxruntime and NumPy to float rounding (2e-7
    in 800 random cases of these forms; X's projection in float would be
    ~1e-2 off). Later steps may round a quantized h the other way (a
    last-bit difference in h), which the next steps carry; and onnxruntime
    quantizes h over chunks of the batch that depend on its thread count,
    where the kernel takes the whole batch. Over the same 800 cases (and
    200 each of batches 6 and 9) the outputs (bounded by 1) differed from
    onnxruntime by up to 2.1e-2, so 5e-2, and from NumPy by up to 3.6e-3,
    so 1e-2."""
    dirs, inp, seq = (2 if direction == "bidirectional" else 1), 5, 6
    w = rng.integers(-127, 128, (dirs, inp, 4 * hidden)).astype(np.int8)
    r = rng.integers(-127, 128, (dirs, hidden, 4 * hidden)).astype(np.int8)
    scale_shape = (dirs, 4 * hidden) if per_column else (dirs,)
    inits = {"w": w, "r": r, "b": rng.standard_normal((dirs, 8 * hidden)).astype(np.float32) * 0.1,
             "ws": rng.uniform(0.002, 0.004, scale_shape).astype(np.float32),
             "wz": np.zeros(scale_shape, np.int8),
             "rs": (rng.uniform(0.02, 0.04, scale_shape) / np.sqrt(hidden)).astype(np.float32),
             "rz": np.zeros(scale_shape, np.int8)}
    node = helper.make_node("DynamicQuantizeLSTM", ["x", "w", "r", "b", "", "", "", "", "ws", "wz", "rs", "rz"],
                            ["y", "y_h", "y_c"], domain=MS, hidden_size=hidden, direction=direction)
    model = _model([node], [_vi("x", [seq, batch, inp])], [_vi("y", None), _vi("y_h", None), _vi("y_c", None)], inits)
    x = rng.standard_normal((seq, batch, inp)).astype(np.float32)
    engine = twinfer.load(model, device="cpu")
    assert [row.kernel for row in engine.kernel_report({"x": x}) if row.op == "LSTM"] == \
        ["onednn int8 input projections (X quantized), int8 recurrence (h quantized per step) + vectorised gates"]
    got = engine.run({"x": x})
    ort_outs = run_ort(model, {"x": x})
    for out, want in zip(("y", "y_h", "y_c"), ort_outs):
        np.testing.assert_allclose(got[out].numpy(), want, rtol=0, atol=5e-2, err_msg=out)
    ws, rs = (inits[k].reshape(dirs, -1) for k in ("ws", "rs"))
    want = _quantized_lstm_reference(x, w, r, inits["b"], ws[:, None, :], rs[:, None, :])
    np.testing.assert_allclose(got["y"].numpy(), want, rtol=0, atol=1e-2)
    for t, d in [(0, 0)] + ([(seq - 1, 1)] if dirs == 2 else []):  # each direction's first step
        np.testing.assert_allclose(got["y"].numpy()[t, d], want[t, d], rtol=0, atol=1e-5)
        np.testing.assert_allclose(got["y"].numpy()[t, d], ort_outs[0][t, d], rtol=0, atol=1e-5)


@pytest.mark.parametrize("zero_in,kernel", [
    ("r", "onednn int8 input projections (X quantized), recurrent products as loops (small steps) + vectorised gates"),
    ("w", "onednn matmuls (int8 recurrence, h quantized per step) + vectorised gates")])
def test_dynamic_quantize_lstm_with_a_zero_point_runs_that_product_in_float(rng, zero_in, kernel):
    # A nonzero zero point of W or R: that product in float on (q - z) * scale,
    # the other in int8. Against the same arithmetic in NumPy (1000 random
    # cases: up to 3.0e-3, where an h rounds the other way), so 1e-2; against
    # onnxruntime (which runs both in int8) loosely: X's rounding in its
    # projection moved outputs by up to 4.6e-2 in those cases, so 1e-1.
    hidden, inp, seq, batch = 6 if zero_in == "r" else 24, 4, 5, 2
    inits = {"w": rng.integers(-127, 128, (1, inp, 4 * hidden)).astype(np.int8),
             "r": rng.integers(-127, 128, (1, hidden, 4 * hidden)).astype(np.int8),
             "ws": np.array([0.01], np.float32), "wz": np.zeros(1, np.int8),
             "rs": np.array([0.01], np.float32), "rz": np.zeros(1, np.int8)}
    inits[zero_in + "z"] = np.array([3], np.int8)
    node = helper.make_node("DynamicQuantizeLSTM", ["x", "w", "r", "", "", "", "", "", "ws", "wz", "rs", "rz"],
                            ["y"], domain=MS, hidden_size=hidden)
    model = _model([node], [_vi("x", [seq, batch, inp])], [_vi("y", None)], inits)
    x = rng.standard_normal((seq, batch, inp)).astype(np.float32)
    engine = twinfer.load(model, device="cpu")
    assert [row.kernel for row in engine.kernel_report({"x": x}) if row.op == "LSTM"] == [kernel]
    got = engine.run({"x": x})["y"].numpy()
    want = _quantized_lstm_reference(x, inits["w"], inits["r"], np.zeros((1, 8 * hidden), np.float32),
                                     inits["ws"], inits["rs"], int(inits["wz"][0]), int(inits["rz"][0]))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-2)
    np.testing.assert_allclose(got, run_ort(model, {"x": x})[0], rtol=0, atol=1e-1)


def test_an_uncovered_form_is_still_reported_as_unsupported():
    model = _model([helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain=MS, transBatchA=1)],
                   [_vi("a", [2, 3, 4]), _vi("b", [4, 5])], [_vi("y", None)])
    with pytest.raises(twinfer.UnsupportedOpError, match="com.microsoft::FusedMatMul"):
        twinfer.load(model, device="cpu")
