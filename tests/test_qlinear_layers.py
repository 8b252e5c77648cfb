"""QLinearConv and QLinearMatMul, the QOperator format's integer layers.

With weights that fit int8 less their zero points (onnxruntime's QInt8
weights, zero points 0; uint8 weights around 128) the load rewrites them into
com.twinfer::QConv / QMatMul (graph/passes/fuse_qlinear.cc), the fused int8
kernels: oneDNN's on the CPU, cuDNN's / cuBLASLt's on a GPU. Other weights
keep their layers' own kernels: on the CPU an im2col and oneDNN's int8
matmul, on a GPU a direct kernel (backends/cuda/integer_ops.cu).

Each case is checked against a float64 NumPy / PyTorch reference of the
ONNX definition on fresh random integers. The fused kernels scale the sum by
x_scale * w_scale / y_scale in a different order of float operations than
the definition's, so a value within rounding of a half level may land one
level away: at most one level, on a few elements."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import twinfer
from conftest import SIM_AS_CUDA
from onnx_helpers import ort_quantized_model, run_ort

DEVICES = ["cpu", SIM_AS_CUDA, pytest.param("cuda", marks=pytest.mark.cuda)]
NP_TO_ONNX = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8,
              np.dtype(np.int32): TensorProto.INT32, np.dtype(np.float32): TensorProto.FLOAT}


def _q8(rng, shape, dt):
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max + 1, size=shape).astype(dt)


def _zero(rng, dt, shape=()):
    return rng.integers(100, 156, size=shape).astype(dt) if dt == np.uint8 else rng.integers(-20, 21, size=shape).astype(dt)


def _model(op, x, consts: dict, names, attrs, ydt):
    """One node reading graph input x and the constants, output y of type ydt."""
    node = helper.make_node(op, names, ["y"], name="layer", **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", NP_TO_ONNX[x.dtype], list(x.shape))],
        [helper.make_tensor_value_info("y", NP_TO_ONNX[np.dtype(ydt)], None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _requantize(acc, mult, yz, ydt):
    info = np.iinfo(ydt)
    return np.clip(np.round(acc * mult + np.float64(yz)), info.min, info.max).astype(ydt)


def _conv_reference(x, xs, xz, w, ws, wz, ys, yz, bias, ydt, group, pads, strides, dil):
    """QLinearConv's definition in float64: the integer convolution of
    (x - xz) and (w - wz) (exact in float64 at these sizes) plus the int32
    bias, times x_scale * w_scale[m] / y_scale, rounded half to even."""
    torch = pytest.importorskip("torch")
    nsp = x.ndim - 2
    xt = torch.from_numpy(x.astype(np.float64) - float(xz))
    wz = np.asarray(wz, np.float64).reshape((-1,) + (1,) * (nsp + 1)) if np.ndim(wz) else np.float64(wz)
    wt = torch.from_numpy(w.astype(np.float64) - wz)
    begin, end = pads[:nsp], pads[nsp:]
    pad_arg = []
    for b, e in zip(reversed(begin), reversed(end)):
        pad_arg += [b, e]
    xt = torch.nn.functional.pad(xt, pad_arg)
    conv = [None, torch.nn.functional.conv1d, torch.nn.functional.conv2d, torch.nn.functional.conv3d][nsp]
    acc = conv(xt, wt, stride=strides, dilation=dil, groups=group).numpy()
    shape = (1, -1) + (1,) * nsp
    if bias is not None:
        acc = acc + bias.astype(np.float64).reshape(shape)
    mult = (np.float64(xs) * np.asarray(ws, np.float64) / np.float64(ys)).reshape(shape) if np.ndim(ws) else \
        np.float64(xs) * np.float64(ws) / np.float64(ys)
    return _requantize(acc, mult, yz, ydt)


def _assert_levels(got, want, max_off=0.002):
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
    diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
    assert diff.max(initial=0) <= 1, f"{(diff > 1).sum()} elements more than one level off"
    assert (diff > 0).mean() <= max_off, f"{(diff > 0).mean():.3%} of the elements one level off"


def _load(model, device, **opts):
    if device == "cpu":
        return twinfer.load(model, device="cpu", **opts)
    return twinfer.load(model, device=device, sim_coverage="cuda", allow_cpu_fallback=False, **opts)


def _run(model, x, device, **opts):
    """Output y and the ops the plan ran (every node on the device for sim / cuda)."""
    eng = _load(model, device, **opts)
    y = eng.run({"x": x})["y"].numpy()
    rows = eng.kernel_report({"x": x.shape})
    if device != "cpu":
        assert all(r.backend in (device, "copy") for r in rows), rows
    return y, [r.op for r in rows]


# case: (x shape, w shape, group, pads, strides, dilations)
CONV_CASES = {
    "2d_pads": ((2, 5, 11, 9), (7, 5, 3, 3), 1, [1, 2, 1, 0], [1, 1], [1, 1]),
    "2d_strided_dilated": ((1, 4, 13, 10), (6, 4, 3, 2), 1, [1, 1, 2, 1], [2, 3], [2, 1]),
    "grouped": ((2, 6, 7, 8), (9, 2, 3, 3), 3, [1, 1, 1, 1], [1, 1], [1, 1]),
    "depthwise": ((1, 8, 9, 7), (8, 1, 3, 3), 8, [1, 1, 1, 1], [2, 2], [1, 1]),
    "1x1": ((3, 16, 5, 6), (24, 16, 1, 1), 1, [0, 0, 0, 0], [1, 1], [1, 1]),
    "1d": ((2, 3, 17), (5, 3, 4), 1, [2, 1], [2], [1]),
    "3d": ((1, 3, 4, 6, 5), (4, 3, 2, 3, 2), 1, [0, 1, 1, 1, 0, 0], [1, 1, 2], [1, 1, 1]),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", list(CONV_CASES))
@pytest.mark.parametrize("xdt,ydt", [(np.uint8, np.uint8), (np.int8, np.int8), (np.uint8, np.int8)],
                         ids=["u8u8", "s8s8", "u8s8"])
def test_qlinear_conv_with_int8_weights_runs_fused(device, rng, case, xdt, ydt):
    """QInt8 weights, zero points 0, per-channel scales, an int32 bias:
    com.twinfer::QConv (on a device not for 3 spatial dims, which the CUDA
    QConv lacks: QLinearConv's direct kernel), and the values of the definition."""
    xshape, wshape, group, pads, strides, dil = CONV_CASES[case]
    m = wshape[0]
    x, w = _q8(rng, xshape, xdt), _q8(rng, wshape, np.int8)
    xs, ys = np.float32(rng.uniform(0.01, 0.03)), np.float32(rng.uniform(0.05, 0.4))
    ws = rng.uniform(0.002, 0.01, m).astype(np.float32)
    xz, yz = _zero(rng, xdt), _zero(rng, ydt)
    bias = rng.integers(-3000, 3000, m).astype(np.int32)
    consts = {"xs": xs, "xz": xz, "w": w, "ws": ws, "wz": np.zeros(m, np.int8), "ys": ys, "yz": yz, "b": bias}
    attrs = {"group": group, "pads": pads, "strides": strides, "dilations": dil}
    model = _model("QLinearConv", x, consts, ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], attrs, ydt)
    got, ops = _run(model, x, device)
    if case == "3d" and device != "cpu":
        assert ops == ["QLinearConv"], ops
    else:
        assert "com.twinfer::QConv" in ops and "QLinearConv" not in ops, ops
    want = _conv_reference(x, xs, xz, w, ws, 0, ys, yz, bias, ydt, group, pads, strides, dil)
    _assert_levels(got, want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("form", ["uint8_around_zero_points", "int8_around_zero_points"])
@pytest.mark.parametrize("case", ["2d_pads", "grouped", "1x1"])
def test_qlinear_conv_weights_that_fit_int8_once_centred_run_fused(device, rng, form, case):
    """uint8 weights around their zero points (older quantizers' asymmetric
    weights) and int8 weights around nonzero ones: w - w_zero_point fits
    int8, so the load hands the fused kernel that exact int8 copy."""
    xshape, wshape, group, pads, strides, dil = CONV_CASES[case]
    m = wshape[0]
    wdt = np.uint8 if form.startswith("uint8") else np.int8
    wz = (rng.integers(118, 138, m) if wdt == np.uint8 else rng.integers(-9, 10, m)).astype(wdt)
    centred = rng.integers(-118, 118, wshape)
    w = (centred + wz.astype(np.int64).reshape((-1,) + (1,) * (len(wshape) - 1))).astype(wdt)
    x = _q8(rng, xshape, np.uint8)
    xs, ys = np.float32(rng.uniform(0.01, 0.03)), np.float32(rng.uniform(0.05, 0.4))
    ws = rng.uniform(0.002, 0.01, m).astype(np.float32)
    xz, yz = _zero(rng, np.uint8), _zero(rng, np.uint8)
    bias = rng.integers(-3000, 3000, m).astype(np.int32)
    consts = {"xs": xs, "xz": xz, "w": w, "ws": ws, "wz": wz, "ys": ys, "yz": yz, "b": bias}
    attrs = {"group": group, "pads": pads, "strides": strides, "dilations": dil}
    model = _model("QLinearConv", x, consts, ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], attrs, np.uint8)
    got, ops = _run(model, x, device)
    assert "com.twinfer::QConv" in ops and "QLinearConv" not in ops, ops
    want = _conv_reference(x, xs, xz, w, ws, wz, ys, yz, bias, np.uint8, group, pads, strides, dil)
    _assert_levels(got, want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("form", ["uint8_weights", "weight_zero_points", "unoptimized"])
@pytest.mark.parametrize("case", ["2d_strided_dilated", "grouped", "1d", "3d"])
def test_qlinear_conv_other_forms_keep_their_kernel(device, rng, form, case):
    """Weights that do not fit int8 less their zero points (full-range uint8
    around 100-156, full-range int8 around -20-20) have no fused form:
    QLinearConv's own kernel (on a GPU the direct one), exact to the
    definition's float64 requantization but for one level at rounding
    boundaries (the scale product is float32, as onnxruntime's)."""
    xshape, wshape, group, pads, strides, dil = CONV_CASES[case]
    m = wshape[0]
    wdt = np.uint8 if form == "uint8_weights" else np.int8
    x, w = _q8(rng, xshape, np.uint8), _q8(rng, wshape, wdt)
    xs, ys = np.float32(rng.uniform(0.01, 0.03)), np.float32(rng.uniform(0.05, 0.4))
    ws = rng.uniform(0.002, 0.01, m).astype(np.float32)
    wz = np.zeros(m, np.int8) if form == "unoptimized" else _zero(rng, wdt, (m,))
    if form != "unoptimized":  # one weight of channel 0 out of int8's reach once centred
        wz[0] = 100 if wdt == np.uint8 else -20
        w.flat[0] = np.iinfo(wdt).max
    xz, yz = _zero(rng, np.uint8), _zero(rng, np.uint8)
    bias = rng.integers(-3000, 3000, m).astype(np.int32)
    consts = {"xs": xs, "xz": xz, "w": w, "ws": ws, "wz": wz, "ys": ys, "yz": yz, "b": bias}
    attrs = {"group": group, "pads": pads, "strides": strides, "dilations": dil}
    model = _model("QLinearConv", x, consts, ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], attrs, np.uint8)
    got, ops = _run(model, x, device, **({"optimize": False} if form == "unoptimized" else {}))
    assert "QLinearConv" in ops, ops
    want = _conv_reference(x, xs, xz, w, ws, wz, ys, yz, bias, np.uint8, group, pads, strides, dil)
    _assert_levels(got, want, max_off=0.002)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("ashape", [(5, 13), (2, 3, 5, 13)], ids=["2d", "batched"])
@pytest.mark.parametrize("per_column", [False, True])
def test_qlinear_matmul_with_int8_weights_runs_fused(device, rng, ashape, per_column):
    """QLinearMatMul with constant int8 b (zero points 0): com.twinfer::QMatMul."""
    k, n = ashape[-1], 11
    a, b = _q8(rng, ashape, np.uint8), _q8(rng, (k, n), np.int8)
    as_, ys = np.float32(rng.uniform(0.01, 0.03)), np.float32(rng.uniform(0.05, 0.2))
    bs = rng.uniform(0.002, 0.01, n).astype(np.float32) if per_column else np.float32(0.006)
    az, yz = _zero(rng, np.uint8), _zero(rng, np.int8)
    consts = {"as": as_, "az": az, "b": b, "bs": bs, "bz": np.zeros(n if per_column else (), np.int8), "ys": ys,
              "yz": yz}
    model = _model("QLinearMatMul", a, consts, ["x", "as", "az", "b", "bs", "bz", "ys", "yz"], {}, np.int8)
    got, ops = _run(model, a, device)
    assert "com.twinfer::QMatMul" in ops and "QLinearMatMul" not in ops, ops
    acc = (a.astype(np.float64) - float(az)) @ b.astype(np.float64)
    want = _requantize(acc, np.float64(as_) * np.asarray(bs, np.float64) / np.float64(ys), yz, np.int8)
    _assert_levels(got, want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bdt", [np.uint8, np.int8], ids=["u8", "s8"])
def test_qlinear_matmul_weights_around_zero_points_run_fused(device, rng, bdt):
    """b around per-column zero points (uint8 near 128, int8 near a small
    offset): centred into an exact int8 copy, column by column."""
    k, n = 21, 9
    bz = (rng.integers(118, 138, n) if bdt == np.uint8 else rng.integers(-9, 10, n)).astype(bdt)
    b = (rng.integers(-118, 118, (k, n)) + bz.astype(np.int64)).astype(bdt)
    a = _q8(rng, (3, 4, k), np.uint8)
    as_, ys = np.float32(rng.uniform(0.01, 0.03)), np.float32(rng.uniform(0.05, 0.2))
    bs = rng.uniform(0.002, 0.01, n).astype(np.float32)
    az, yz = _zero(rng, np.uint8), _zero(rng, np.uint8)
    consts = {"as": as_, "az": az, "b": b, "bs": bs, "bz": bz, "ys": ys, "yz": yz}
    model = _model("QLinearMatMul", a, consts, ["x", "as", "az", "b", "bs", "bz", "ys", "yz"], {}, np.uint8)
    got, ops = _run(model, a, device)
    assert ops == ["com.twinfer::QMatMul"], ops
    acc = (a.astype(np.float64) - float(az)) @ (b.astype(np.float64) - bz.astype(np.float64))
    want = _requantize(acc, np.float64(as_) * bs.astype(np.float64) / np.float64(ys), yz, np.uint8)
    _assert_levels(got, want)


@pytest.mark.parametrize("device", DEVICES)
def test_qlinear_conv_weights_behind_identity_run_fused(device, rng):
    """The TorchScript exporter shares initializers through Identity nodes:
    the fused node reads the constants behind them."""
    x, w = _q8(rng, (1, 3, 7, 6), np.uint8), _q8(rng, (4, 3, 3, 3), np.int8)
    consts = {"xs": np.float32(0.02), "xz": np.uint8(120), "w0": w, "ws": rng.uniform(0.002, 0.01, 4).astype(np.float32),
              "wz0": np.zeros(4, np.int8), "ys": np.float32(0.2), "yz0": np.uint8(7)}
    nodes = [helper.make_node("Identity", [f"{c}0"], [c]) for c in ("w", "wz", "yz")]
    nodes.append(helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"],
                                  pads=[1, 1, 1, 1]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, list(x.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    got, ops = _run(model, x, device)
    assert "com.twinfer::QConv" in ops and "QLinearConv" not in ops, ops
    want = _conv_reference(x, consts["xs"], consts["xz"], w, consts["ws"], 0, consts["ys"], consts["yz0"], None,
                           np.uint8, 1, [1, 1, 1, 1], [1, 1], [1, 1])
    _assert_levels(got, want)


def _small_cnn_quantized(folder, rng, activation, per_channel, quant_format):
    """Three convolutions (one grouped, a residual Add) and a projection,
    quantized by onnxruntime's quantize_static in `quant_format`."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxruntime.quantization")
    nn = torch.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = nn.Conv2d(3, 16, 3, padding=1), nn.Conv2d(16, 16, 3, padding=1, stride=2)
            self.c3 = nn.Conv2d(16, 16, 3, padding=1, groups=16)
            self.proj = nn.Parameter(torch.randn(16, 12) * 0.3)

        def forward(self, x):
            a = torch.relu(self.c1(x))
            b = torch.relu(self.c2(a))
            c = b + self.c3(b)
            return nn.functional.adaptive_avg_pool2d(c, 1).flatten(1) @ self.proj

    torch.manual_seed(int(rng.integers(1 << 30)))
    return ort_quantized_model(Net(), folder, rng, activation, per_channel, quant_format=quant_format)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("activation", ["QUInt8", "QInt8"])
@pytest.mark.parametrize("per_channel", [False, True])
def test_a_qoperator_model_runs_on_the_int8_kernels(tmp_path, rng, device, activation, per_channel):
    """A small CNN and a projection through onnxruntime's quantize_static in the
    QOperator format (QLinearConv, QLinearMatMul, QGemm, QLinearAdd, ...):
    every node on the device's kernels, no QLinearConv / QLinearMatMul left,
    and onnxruntime's output to one level of the last quantized layer."""
    model = _small_cnn_quantized(tmp_path, rng, activation, per_channel, "QOperator")
    ops = {n.op_type for n in model.graph.node}
    assert {"QLinearConv", "QLinearMatMul"} <= ops, ops
    x = rng.standard_normal((3, 3, 15, 17)).astype(np.float32)
    want = run_ort(model, {"x": x})[0]
    got, ran = _run(model, x, device)
    assert "QLinearConv" not in ran and "QLinearMatMul" not in ran, ran
    assert ran.count("com.twinfer::QConv") == 3 and "com.twinfer::QMatMul" in ran, ran
    # y is QLinearMatMul's output dequantized: one level is its y_scale.
    y_scale = next(numpy_helper.to_array(t) for t in model.graph.initializer
                   if t.name == next(n for n in model.graph.node if n.op_type == "QLinearMatMul").input[6])
    np.testing.assert_allclose(got, want, rtol=0, atol=1.01 * float(y_scale))


@pytest.mark.parametrize("device", [SIM_AS_CUDA, pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
@pytest.mark.parametrize("quant_format", ["QDQ", "QOperator"])
def test_an_imported_int8_model_at_a_16_bit_precision(tmp_path, rng, device, precision, quant_format):
    """precision="fp16" / "bf16" lowers what a quantized model leaves in
    float; its fused int8 layers keep their float32 scales (QConv built with
    16-bit scales failed: pipecat's smart-turn, a QDQ Whisper encoder). The
    result is onnxruntime's float32 run of the same file to a few levels of
    the last quantized layer: the 16-bit float parts round differently, and
    a value near a level's edge lands on the other side."""
    model = _small_cnn_quantized(tmp_path, rng, "QInt8", True, quant_format)
    x = rng.standard_normal((3, 3, 15, 17)).astype(np.float32)
    want = run_ort(model, {"x": x})[0]
    got, ran = _run(model, x, device, precision=precision)
    assert ran.count("com.twinfer::QConv") == 3, ran
    scale = float(np.abs(want).max())
    err = float(np.abs(got.astype(np.float64) - want).max())
    # A level of the projection's int8 output is about 1/127 of the range;
    # over 8 seeds the largest difference was 1.5% of it (two levels).
    assert err <= 0.03 * scale, (err, scale)
