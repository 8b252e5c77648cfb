"""INT8 for transformers: per-token dynamic activation scales and activation
smoothing (SmoothQuant's idea, twinfer.quantize.smoothing).

* The kernels against NumPy: com.twinfer::TokenQDQ (each row quantized with
  its own scale and dequantized) and com.twinfer::QMatMul with x_per_token
  (float rows quantized inside the kernel, int8 GEMM, row scale times weight
  scale, bias, activation), on the CPU and on the device (the simulated one
  placing nodes as CUDA does, which runs the CPU kernels; a GPU runs its own).
* The smoothing factors against the formula, and the smoothing pass on a
  transformer block with outlier channels against onnxruntime's float32.
* MiniLM with its real weights, on sentences calibration never saw:
  precision="int8" as it comes, embeddings against the float32 engine and
  sentence-transformers; analyze(accuracy_target=0.995) meets its target
  keeping at most 4 layers in float.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_helpers import run_ort

import twinfer
from conftest import SIM_AS_CUDA
from twinfer.quantize import Calibration, analyze, calibrate
from twinfer.quantize.smoothing import smoothing_factors

F = TensorProto.FLOAT
F32 = np.float32
DEVICES = ["cpu", SIM_AS_CUDA, pytest.param("cuda", marks=pytest.mark.cuda)]


def token_quantize(x):
    """Per-row symmetric int8 in NumPy: scale = max|x| / 127 (1 for a row of
    zeros), q = round half to even of x / scale, clamped to +-127."""
    rows = x.reshape(-1, x.shape[-1]).astype(F32)
    amax = np.max(np.where(np.isnan(rows), F32(0), np.abs(rows)), axis=1)  # NaN skipped
    scale = np.where(amax > 0, amax / F32(127), F32(1)).astype(F32)
    q = np.nan_to_num(np.clip(np.rint(rows / scale[:, None]), -127, 127), nan=0.0)  # NaN quantizes to 0
    return q.astype(np.int8), scale


def _model(nodes, inputs, outputs, inits):
    g = helper.make_graph(nodes, "m", inputs, outputs, [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.twinfer", 1)])
    m.ir_version = 9
    return m


def _load(m, device):
    if device == "cpu":
        return twinfer.load(m, device="cpu")
    # As CUDA places the nodes; every one must have a device kernel.
    return twinfer.load(m, device=device, sim_coverage="cuda", allow_cpu_fallback=False)


def _on_device(eng, device, shapes):
    rows = eng.kernel_report(shapes)
    if device != "cpu":
        assert all(r.backend in (device, "copy") for r in rows), [r for r in rows if r.backend not in (device, "copy")]
    return rows


# --- kernels ---------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(5, 37), (2, 3, 300), (1, 1)])
def test_token_qdq_matches_numpy(device, shape, rng):
    m = _model([helper.make_node("TokenQDQ", ["x"], ["y"], domain="com.twinfer")],
               [helper.make_tensor_value_info("x", F, list(shape))], [helper.make_tensor_value_info("y", F, None)], {})
    x = (rng.standard_normal(shape) * rng.uniform(0.01, 30, shape[:-1] + (1,))).astype(F32)
    rows = x.reshape(-1, shape[-1])
    rows[0] = 0.0  # a row of zeros: scale 1, all zeros
    if len(rows) > 2:
        rows[1, -1] = -4 * np.abs(rows[1]).max() - 1  # the largest magnitude negative
        rows[2, len(rows[2]) // 2] = np.nan  # skipped by the scale, quantized to 0
    eng = _load(m, device)
    _on_device(eng, device, {"x": shape})
    q, s = token_quantize(x)
    want = (q.astype(F32) * s[:, None]).reshape(shape)
    np.testing.assert_array_equal(eng.run({"x": x})["y"].numpy(), want)


def _qmatmul_model(w_q, w_scale, bias, act, trans_b, y_scale=None):
    """com.twinfer::QMatMul with x_per_token: inputs x, -, -, w, w_scale[, bias][, y_scale, y_zero]."""
    inits = {"w": w_q, "ws": w_scale}
    ins = ["x", "", "", "w", "ws", ""]
    if bias is not None:
        inits["b"], ins[5] = bias, "b"
    if y_scale is not None:
        inits["ys"], inits["yz"] = np.float32(y_scale), np.int8(0)
        ins += ["ys", "yz"]
    node = helper.make_node("QMatMul", ins, ["y"], domain="com.twinfer", x_per_token=1, trans_b=int(trans_b),
                            activation=act)
    k = w_q.shape[1] if trans_b else w_q.shape[0]
    out = TensorProto.INT8 if y_scale is not None else F
    return _model([node], [helper.make_tensor_value_info("x", F, ["M", k])], [helper.make_tensor_value_info("y", out, None)],
                  inits)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("K,N,trans_b", [(37, 19, False), (64, 48, True), (5, 3, False)])
@pytest.mark.parametrize("act,with_bias", [("", True), ("Relu", False), ("Gelu", True)])
def test_qmatmul_per_token_matches_numpy(device, K, N, trans_b, act, with_bias, rng):
    w = rng.standard_normal((K, N)).astype(F32) * 0.3
    w_scale = (np.abs(w).max(0) / 127).astype(F32)
    w_q = np.clip(np.rint(w / w_scale), -127, 127).astype(np.int8)
    bias = rng.standard_normal(N).astype(F32) if with_bias else None
    m = _qmatmul_model(w_q.T.copy() if trans_b else w_q, w_scale, bias, act, trans_b)
    # Tokens of very different ranges, as a transformer's are.
    x = (rng.standard_normal((11, K)) * rng.uniform(0.05, 20, (11, 1))).astype(F32)
    eng = _load(m, device)
    rows = _on_device(eng, device, {"x": x.shape})
    assert any("QMatMul" in r.op for r in rows), rows
    q, s = token_quantize(x)
    acc = q.astype(np.int64) @ w_q.astype(np.int64)  # exact integer sums
    want = acc.astype(np.float64) * w_scale[None, :] * s[:, None] + (0 if bias is None else bias)
    if act == "Relu":
        want = np.maximum(want, 0)
    elif act == "Gelu":
        from scipy.special import erf

        want = 0.5 * want * (1 + erf(want / np.sqrt(2)))
    got = eng.run({"x": x})["y"].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("per_token", [True, False])
def test_qmatmul_reads_and_writes_float16_rows(device, per_token, rng):
    """out_dtype = float16 (what lowering sets in a device plan's fp16 rest):
    x's float16 rows quantized per token as they are read, y written in
    float16 by the epilogue, saturated to +-65504 as the Clip -> Cast it
    replaces; NaN from the epilogue (a NaN bias) stays NaN."""
    K, N, M = 45, 21, 13
    w = rng.standard_normal((K, N)).astype(F32) * 0.3
    w_scale = (np.abs(w).max(0) / 127).astype(F32)
    w_scale[3] *= 1e6  # a column far past float16's range: saturates, not inf
    w_q = np.clip(np.rint(w / (np.abs(w).max(0) / 127)), -127, 127).astype(np.int8)
    bias = rng.standard_normal(N).astype(F32)
    bias[5] = np.nan
    if per_token:
        x = (rng.standard_normal((M, K)) * rng.uniform(0.05, 20, (M, 1))).astype(np.float16)
        m = _qmatmul_model(w_q, w_scale, bias, "", False)
        m.graph.input[0].type.tensor_type.elem_type = TensorProto.FLOAT16
        q, s = token_quantize(x.astype(F32))
    else:  # int8 x with its scale: only y is 16-bit
        q = rng.integers(-127, 128, (M, K)).astype(np.int8)
        s = np.full(M, 0.05, F32)
        node = helper.make_node("QMatMul", ["x", "xs", "", "w", "ws", "b"], ["y"], domain="com.twinfer")
        m = _model([node], [helper.make_tensor_value_info("x", TensorProto.INT8, ["M", K])],
                   [helper.make_tensor_value_info("y", F, None)],
                   {"xs": np.float32(0.05), "w": w_q, "ws": w_scale, "b": bias})
        x = q
    m.graph.node[0].attribute.append(helper.make_attribute("out_dtype", TensorProto.FLOAT16))
    m.graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT16
    eng = _load(m, device)
    rows = _on_device(eng, device, {"x": x.shape})
    assert [r.dtype for r in rows if "QMatMul" in r.op] == ["float16"], rows
    acc = q.astype(np.int64) @ w_q.astype(np.int64)
    want = (acc.astype(np.float64) * w_scale[None, :] * s[:, None] + bias).astype(F32)
    assert np.abs(want[:, 3]).max() > 65504  # the column meant to saturate does
    want = np.clip(want, -65504, 65504).astype(np.float16)
    got = eng.run({"x": x})["y"].numpy()
    assert got.dtype == np.float16 and got.shape == (M, N)
    assert np.isnan(got[:, 5]).all() and not np.isinf(got).any()
    np.testing.assert_allclose(got.astype(F32), want.astype(F32), rtol=2e-3, atol=1e-3 * np.abs(want[:, :3]).max())


@pytest.mark.parametrize("device", DEVICES)
def test_qmatmul_per_token_quantized_output(device, rng):
    K, N = 33, 21
    w = rng.standard_normal((K, N)).astype(F32) * 0.3
    w_scale = (np.abs(w).max(0) / 127).astype(F32)
    w_q = np.clip(np.rint(w / w_scale), -127, 127).astype(np.int8)
    bias = rng.standard_normal(N).astype(F32)
    m = _qmatmul_model(w_q, w_scale, bias, "Relu", False, y_scale=0.05)
    x = (rng.standard_normal((7, K)) * rng.uniform(0.1, 5, (7, 1))).astype(F32)
    eng = _load(m, device)
    _on_device(eng, device, {"x": x.shape})
    q, s = token_quantize(x)
    y = np.maximum((q.astype(np.int64) @ w_q.astype(np.int64)) * w_scale[None, :] * s[:, None] + bias, 0)
    want = np.clip(np.rint(y / F32(0.05)), -128, 127)
    got = eng.run({"x": x})["y"].numpy().astype(np.float64)
    assert np.abs(got - want).max() <= 1  # one step where float32 rounding lands on the other side of .5
    assert np.mean(got == want) > 0.97


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("trans_b", [False, True])
def test_qmatmul_per_token_smoothed_rows_match_numpy(device, trans_b, rng):
    """x_smooth: the rows quantized are x * x_smooth (each channel its own
    factor, the largest |x * s| setting the row's scale), not x."""
    K, N = 45, 13
    w = rng.standard_normal((K, N)).astype(F32) * 0.3
    w_scale = (np.abs(w).max(0) / 127).astype(F32)
    w_q = np.clip(np.rint(w / w_scale), -127, 127).astype(np.int8)
    smooth = rng.uniform(0.05, 8, K).astype(F32)
    smooth[7] = 40.0  # a channel the factor makes the row's largest
    m = _qmatmul_model(w_q.T.copy() if trans_b else w_q, w_scale, None, "Relu", trans_b)
    m.graph.node[0].input.extend(["", "", "xs"])  # inputs 6, 7 (y_scale, y_zero) absent, 8 x_smooth
    m.graph.initializer.append(numpy_helper.from_array(smooth, "xs"))
    m.graph.input[0].type.tensor_type.shape.ClearField("dim")
    for d in ("B", "T", K):
        dim = m.graph.input[0].type.tensor_type.shape.dim.add()
        if isinstance(d, str):
            dim.dim_param = d
        else:
            dim.dim_value = d
    x = (rng.standard_normal((2, 9, K)) * rng.uniform(0.05, 20, (2, 9, 1))).astype(F32)
    eng = _load(m, device)
    _on_device(eng, device, {"x": x.shape})
    q, s = token_quantize(x * smooth)  # float32 product, as a Mul node would write it
    want = np.maximum((q.astype(np.int64) @ w_q.astype(np.int64)) * w_scale[None, :] * s[:, None], 0)
    got = eng.run({"x": x})["y"].numpy().reshape(-1, N)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    plain = _load(_qmatmul_model(w_q.T.copy() if trans_b else w_q, w_scale, None, "Relu", trans_b), device)
    assert np.abs(plain.run({"x": x.reshape(-1, K)})["y"].numpy() - want).max() > 1e-2 * np.abs(want).max()


def _smoothed_qdq_model(rng, K, N, factor_shape, x_shape, also_output):
    """x -> Mul(x, factors) -> TokenQDQ -> MatMul(., DequantizeLinear(w_q)):
    what insert_qdq writes after smooth_activations put a Mul in front."""
    w = rng.standard_normal((K, N)).astype(F32) * 0.3
    w_scale = (np.abs(w).max(0) / 127).astype(F32)
    w_q = np.clip(np.rint(w / w_scale), -127, 127).astype(np.int8)
    factors = rng.uniform(0.1, 6, factor_shape).astype(F32)
    nodes = [helper.make_node("Mul", ["x", "f"], ["xs"]),
             helper.make_node("TokenQDQ", ["xs"], ["xq"], domain="com.twinfer"),
             helper.make_node("DequantizeLinear", ["wq", "ws"], ["w"], axis=1),
             helper.make_node("MatMul", ["xq", "w"], ["y"])]
    outs = [helper.make_tensor_value_info("y", F, None)]
    if also_output:
        outs.append(helper.make_tensor_value_info("xs", F, None))
    m = _model(nodes, [helper.make_tensor_value_info("x", F, list(x_shape))], outs,
               {"f": factors, "wq": w_q, "ws": w_scale})
    return m, factors, w_q, w_scale


@pytest.mark.parametrize("device", ["cpu", SIM_AS_CUDA])
@pytest.mark.parametrize("factor_shape,x_shape,folds", [((24,), (3, 5, 24), True), ((1, 24), (7, 24), True),
                                                         ((1,), (4, 24), True), ((1, 1, 24), (7, 24), False)])
@pytest.mark.parametrize("also_output", [False, True])
def test_smoothing_mul_folds_into_the_per_token_qmatmul(device, factor_shape, x_shape, folds, also_output, rng):
    """The QDQ fusion takes a per-channel Mul in front of TokenQDQ into the
    QMatMul (x_smooth); a Mul that broadcasts x to a higher rank stays, and a
    Mul whose output is also read elsewhere stays for that reader. Reference:
    NumPy's per-token quantization of the float32 product."""
    m, factors, w_q, w_scale = _smoothed_qdq_model(rng, 24, 10, factor_shape, x_shape, also_output)
    x = (rng.standard_normal(x_shape) * rng.uniform(0.1, 10, x_shape[:-1] + (1,))).astype(F32)
    eng = _load(m, device)
    rows = _on_device(eng, device, {"x": x.shape})
    ops = [r.op for r in rows]
    assert any("QMatMul" in o for o in ops), ops
    assert ("Mul" in ops) == (also_output or not folds), ops
    xs = x * factors
    q, s = token_quantize(xs)
    want = (q.astype(np.int64) @ w_q.astype(np.int64)) * w_scale[None, :] * s[:, None]
    out = eng.run({"x": x})
    np.testing.assert_allclose(out["y"].numpy().reshape(-1, 10), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    if also_output:
        np.testing.assert_array_equal(out["xs"].numpy(), xs)


# --- smoothing ----------------------------------------------------------------

def test_smoothing_factors_follow_the_formula():
    a = np.array([4.0, 0.25, 0.0, 9.0])
    w = np.array([1.0, 4.0, 2.0, 0.0])
    s = smoothing_factors(a, w, 0.5)
    np.testing.assert_allclose(s, [2.0, 0.25, 1.0, 1.0], rtol=1e-6)  # 1 where either side is 0
    np.testing.assert_allclose(smoothing_factors(a[:2], w[:2], 0.75), [4.0 ** 0.75, 0.25 ** 0.75 / 4.0 ** 0.25],
                               rtol=1e-6)
    with pytest.raises(ValueError):
        smoothing_factors(a, w, 1.5)


def outlier_block(rng, d=64, ff=128, transposed=False):
    """LayerNorm -> MatMul -> Sigmoid -> MatMul, with three LayerNorm
    channels 30x the rest (a transformer's outlier dimensions). The first
    smoothing folds into the LayerNorm, the second goes through a Mul.
    `transposed`: the first weight is stored [ff, d] behind a Transpose (the
    build folds it; smoothing must scale the matrix it becomes)."""
    gamma = np.ones(d, F32)
    gamma[[3, 17, 40]] = 30.0
    w1 = rng.standard_normal((d, ff)).astype(F32) * 0.1
    w2 = rng.standard_normal((ff, d)).astype(F32) * 0.1
    inits = {"g": gamma, "b": rng.standard_normal(d).astype(F32) * 0.1, "w1": w1.T.copy() if transposed else w1,
             "b1": rng.standard_normal(ff).astype(F32) * 0.1, "w2": w2}
    nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["h"], axis=-1)]
    w = "w1"
    if transposed:
        nodes.append(helper.make_node("Transpose", ["w1"], ["w1t"], perm=[1, 0]))
        w = "w1t"
    nodes += [helper.make_node("MatMul", ["h", w], ["f0"]), helper.make_node("Add", ["f0", "b1"], ["f"]),
              helper.make_node("Sigmoid", ["f"], ["a"]), helper.make_node("MatMul", ["a", "w2"], ["y"])]
    g = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", F, ["B", "T", d])],
                          [helper.make_tensor_value_info("y", F, None)],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _cos(a, b):
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


@pytest.mark.parametrize("transposed", [False, True])
def test_smoothing_moves_outlier_channels_into_the_weights(transposed, rng):
    m = outlier_block(rng, transposed=transposed)
    # Enough tokens that the smoothed range (set by the ordinary channels,
    # no longer by the outliers) is rarely clipped by unseen data: with 512
    # (8 batches) two seeds in 31 clipped, and smoothing then gained only
    # 1.0-1.4x; with 2048 the least over 100 seeds was 2.6x.
    data = [{"x": rng.standard_normal((4, 16, 64)).astype(F32)} for _ in range(32)]
    cal = calibrate(m, data, progress=False)
    assert {"h", "a"} <= set(cal.tokens) and {"h", "a"} <= set(cal.smoothing) and cal.smoothing_alpha == 0.5
    s = np.asarray(cal.smoothing["h"])
    assert s[[3, 17, 40]].min() > 3 * np.median(s)  # the outliers get the largest factors
    x = rng.standard_normal((3, 11, 64)).astype(F32)
    want = run_ort(m, {"x": x})[0]  # float32, independently
    cos = {}
    for smoothing in (True, False):
        eng = twinfer.load(m, device="cpu", precision="int8", calibration=cal, per_token=False, smoothing=smoothing)
        cos[smoothing] = _cos(eng.run({"x": x})["y"].numpy(), want)
        log = "\n".join(eng.stats()["passes"]) if "passes" in eng.stats() else str(eng.stats())
        assert ("smoothed" in log) == smoothing, log
    # Per-tensor int8 of h spends its levels on three channels without
    # smoothing; with it the product stays close to float32 (the error ~10x
    # smaller; 2.6-12.7x over 100 seeds).
    assert cos[True] > 0.999 and 1 - cos[True] < (1 - cos[False]) / 2, cos


def test_calibration_file_keeps_smoothing_and_old_files_load(rng, tmp_path):
    m = outlier_block(rng)
    cal = calibrate(m, [{"x": rng.standard_normal((2, 5, 64)).astype(F32)}], progress=False, smoothing=0.8)
    cal.save(tmp_path / "c.json")
    back = Calibration.load(tmp_path / "c.json")
    assert back.smoothing == cal.smoothing and back.smoothed_amax == cal.smoothed_amax
    assert back.tokens == cal.tokens and back.smoothing_alpha == 0.8
    d = cal.to_dict()
    for k in ("tokens", "smoothing", "smoothed_amax", "smoothing_alpha"):
        d.pop(k)
    old = Calibration.from_dict(d)  # a file from before smoothing: plain per-tensor int8
    assert not old.smoothing and not old.tokens
    x = rng.standard_normal((1, 5, 64)).astype(F32)
    twinfer.load(m, device="cpu", precision="int8", calibration=old).run({"x": x})
    with pytest.raises(twinfer.InvalidArgumentError):
        twinfer.load(m, device="cpu", precision="int8", calibration=cal, smoothing=2.0)
    with pytest.raises(twinfer.InvalidArgumentError):
        twinfer.load(m, device="cpu", precision="int8", calibration=cal, per_token="yes")


def test_saved_engine_keeps_smoothing_and_per_token(rng, tmp_path):
    m = outlier_block(rng)
    cal = calibrate(m, [{"x": rng.standard_normal((2, 9, 64)).astype(F32)} for _ in range(3)], progress=False)
    eng = twinfer.load(m, device="cpu", precision="int8", calibration=cal)
    eng.save(tmp_path / "block.twinfer")
    back = twinfer.load(tmp_path / "block.twinfer", device="cpu")
    x = rng.standard_normal((2, 5, 64)).astype(F32)
    np.testing.assert_array_equal(back.run({"x": x})["y"].numpy(), eng.run({"x": x})["y"].numpy())
    assert back.calibration.smoothing == cal.smoothing
    rows = back.kernel_report({"x": x.shape})
    assert any("per token" in r.kernel for r in rows)
    # The LayerNorm took the first smoothing; the second's Mul joined its QMatMul.
    assert not any(r.op == "Mul" for r in rows), [r.op for r in rows]


@pytest.mark.parametrize("device", DEVICES[1:])
def test_smoothed_per_token_block_runs_wholly_on_the_device(device, rng):
    m = outlier_block(rng)
    data = [{"x": rng.standard_normal((2, 9, 64)).astype(F32)} for _ in range(3)]
    cal = calibrate(m, data, progress=False)
    eng = twinfer.load(m, device=device, precision="int8", calibration=cal, sim_coverage="cuda",
                       allow_cpu_fallback=False)
    rows = _on_device(eng, device, {"x": (3, 7, 64)})
    assert any("QMatMul" in r.op for r in rows), rows
    x = rng.standard_normal((3, 7, 64)).astype(F32)
    cpu = twinfer.load(m, device="cpu", precision="int8", calibration=cal)
    np.testing.assert_allclose(eng.run({"x": x})["y"].numpy(), cpu.run({"x": x})["y"].numpy(), rtol=0.02, atol=0.02)


# --- MiniLM, real weights --------------------------------------------------------

@pytest.fixture(scope="module")
def minilm_setup():
    minilm = pytest.importorskip("twinfer.models.minilm")
    from test_quantize_int8 import sentences

    ref = minilm.load_reference()
    path = minilm.export_onnx(ref)
    texts = sentences()
    calib_texts = texts[1::3][:48]
    held_out = [t for i, t in enumerate(texts) if i % 3 != 1]  # never seen by calibration
    calibration = [minilm.tokenize(ref, calib_texts[i:i + 8]) for i in range(0, 48, 8)]
    return minilm, ref, path, held_out, calibration


def _embeddings(minilm, ref, engine, texts):
    out = []
    for i in range(0, len(texts), 16):
        feeds = minilm.tokenize(ref, texts[i:i + 16])
        out.append(minilm.pool(engine.run(feeds)["last_hidden_state"].numpy(), feeds["attention_mask"]))
    return np.concatenate(out)


def test_minilm_int8_embeddings_on_held_out_sentences(minilm_setup):
    minilm, ref, path, held_out, calibration = minilm_setup
    e32 = twinfer.load(path, device="cpu")
    f32 = _embeddings(minilm, ref, e32, held_out)
    st = ref.encode(held_out[:32], normalize_embeddings=True, convert_to_numpy=True)  # sentence-transformers
    assert np.sum(f32[:32] * st, axis=1).min() > 0.9999  # the float32 reference is the model's own answer
    e8 = twinfer.load(path, device="cpu", precision="int8", calibration=calibration, progress=False)
    assert e8.calibration.tokens and e8.calibration.smoothing  # on by default for a transformer
    cos = np.sum(f32 * _embeddings(minilm, ref, e8, held_out), axis=1)
    assert cos.mean() >= 0.99 and cos.min() >= 0.98, (cos.mean(), cos.min())
    ops = {r.kernel for r in e8.kernel_report({k: (2, 24) for k in minilm.INPUT_NAMES}) if "QMatMul" in r.op}
    assert any("per token" in k for k in ops), ops


def test_minilm_analyze_meets_0995_with_at_most_4_float_layers(minilm_setup):
    minilm, ref, path, held_out, calibration = minilm_setup
    evaluation = [minilm.tokenize(ref, held_out[i:i + 8]) for i in range(0, 32, 8)]
    # rank="alone" (the default): each layer's own cost. The SQNR ranking
    # counts the error of earlier layers too, and here keeps the last ones.
    report = analyze(path, calibration, data=evaluation, accuracy_target=0.995, max_samples=4, progress=False)
    assert report.output_cosine >= 0.995 and len(report.keep_float) <= 4, (report.output_cosine, report.keep_float,
                                                                           report.steps)
