"""The quantization ops on the device (csrc/backends/cuda/quantize.cu:
QuantizeLinear / DequantizeLinear of every quantized type, float16/bfloat16
scales, per tensor / per axis / blocked; integer_ops.cu: MatMulInteger,
QLinearMatMul, ConvInteger, DynamicQuantizeLinear) against onnxruntime or the
ONNX reference evaluator, on fresh random data with odd sizes.

On the simulated device with sim_coverage="cuda" the nodes are placed as CUDA
would place them (allow_cpu_fallback=False: each has a CUDA kernel whose
supports() takes it) and run by the CPU kernel; on a GPU the CUDA kernel
itself runs."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto as TP
from op_cases import build
from onnx_helpers import run_on_device, run_ort, run_reference

import twinfer
from conftest import SIM_AS_CUDA

DEVICES = [SIM_AS_CUDA, pytest.param("cuda", marks=pytest.mark.cuda)]

INT_Q = [np.int8, np.uint8, np.int16, np.uint16]
SUB_Q = [ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.uint2]
F8_Q = [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2fnuz]
F4_Q = [ml_dtypes.float4_e2m1fn]
ALL_Q = INT_Q + SUB_Q + F8_Q + F4_Q


def _name(d):
    return np.dtype(d).name


def _run(model, feeds, device):
    out = run_on_device(model, feeds, device, optimize=False)
    return [out[o.name] for o in model.graph.output]


def same_bits(got, exp):
    """Equal arrays (any dtype): same bits, or both NaN."""
    got, exp = np.asarray(got), np.asarray(exp)
    assert got.dtype == exp.dtype and got.shape == exp.shape, (got.dtype, exp.dtype, got.shape, exp.shape)
    u = np.dtype(f"u{got.itemsize}")
    ok = got.view(u) == exp.view(u)
    if got.dtype.kind not in "iu" and got.dtype not in SUB_Q:
        g, e = got.astype(np.float32), exp.astype(np.float32)
        ok |= np.isnan(g) & np.isnan(e)
    assert ok.all(), f"{(~ok).sum()} differ, e.g. got {got[~ok][:5]} expected {exp[~ok][:5]}"


def _is_float_q(dt):
    return dt in F8_Q or dt in F4_Q


def _zero_points(rng, dt, shape):
    if _is_float_q(dt):
        return np.zeros(shape, dt)
    info = ml_dtypes.iinfo(dt) if dt in SUB_Q else np.iinfo(dt)
    lo, hi = max(int(info.min), -20), min(int(info.max), 20)
    return rng.integers(lo, hi + 1, size=shape).astype(dt)


def _scales(rng, shape, dt=np.float32, big=False):
    s = rng.random(shape) * 0.2 + 0.01
    if big:
        s = s * 0.05
    return s.astype(dt)


def _data(rng, shape, dt=np.float32, spread=4.0):
    x = rng.standard_normal(shape) * spread
    x.flat[::7] *= 50  # some beyond every range: saturation / overflow
    return x.astype(dt)


def _params(rng, mode, q, shape, sdt=np.float32, big=False):
    """(attrs, scale, zero point) for x of `shape` quantized along axis 1."""
    if mode == "tensor":
        return {}, _scales(rng, (), sdt, big), _zero_points(rng, q, ())
    if mode == "axis":
        return {"axis": 1}, _scales(rng, (shape[1],), sdt, big), _zero_points(rng, q, (shape[1],))
    nb = (shape[1] + 2) // 3
    ps = (shape[0], nb) + tuple(shape[2:])
    return {"axis": 1, "block_size": 3}, _scales(rng, ps, sdt, big), _zero_points(rng, q, ps)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["tensor", "axis", "blocked"])
@pytest.mark.parametrize("q", ALL_Q, ids=_name)
def test_quantize_dequantize_every_type(device, rng, q, mode):
    shape = (3, 7, 5)
    x = _data(rng, shape)
    attrs, s, z = _params(rng, mode, q, shape, big=_is_float_q(q))
    saturations = [1, 0] if q in F8_Q else [None]
    for sat in saturations:
        a = dict(attrs)
        if sat is not None:
            a["saturate"] = sat
        model, feeds = build("QuantizeLinear", [("x", x), ("s", s), ("z", z)], a, out=[q], opset=21)
        got = _run(model, feeds, device)[0]
        same_bits(got, run_reference(model, feeds)[0])
        # back, to float32 and to float16 (a float16 scale)
        model, feeds = build("DequantizeLinear", [("q", got), ("s", s), ("z", z)], attrs, out=[np.float32], opset=21)
        same_bits(_run(model, feeds, device)[0], run_reference(model, feeds)[0])
        s16 = s.astype(np.float16)
        model, feeds = build("DequantizeLinear", [("q", got), ("s", s16), ("z", z)], attrs, out=[np.float16], opset=21)
        same_bits(_run(model, feeds, device)[0], run_reference(model, feeds)[0])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("xdt", [np.float16, ml_dtypes.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("q", [np.int8, np.uint16, ml_dtypes.int4, ml_dtypes.float8_e4m3fn, ml_dtypes.float4_e2m1fn],
                         ids=_name)
@pytest.mark.parametrize("mode", ["tensor", "axis", "blocked"])
def test_quantize_half_inputs_and_scales(device, rng, xdt, q, mode):
    """float16/bfloat16 x with a scale of its type (the division rounds to it)
    and with a float32 scale (float32 division)."""
    shape = (2, 8, 3)
    x = _data(rng, shape, xdt)
    for sdt in [xdt, np.float32]:
        attrs, s, z = _params(rng, mode, q, shape, sdt, big=_is_float_q(q))
        model, feeds = build("QuantizeLinear", [("x", x), ("s", s), ("z", z)], attrs, out=[q], opset=21)
        got = _run(model, feeds, device)[0]
        same_bits(got, run_reference(model, feeds)[0])
        model, feeds = build("DequantizeLinear", [("q", got), ("s", s), ("z", z)], attrs, out=[np.dtype(sdt)],
                             opset=21)
        same_bits(_run(model, feeds, device)[0], run_reference(model, feeds)[0])


@pytest.mark.parametrize("device", DEVICES)
def test_quantize_int8_paths_unchanged(device, rng):
    """The int8/uint8 kernels (float32 scale) against onnxruntime, per tensor and per axis;
    111,111 elements: several blocks of packs (per tensor) and a tail of 3."""
    for x, q, mode in itertools.product([_data(rng, (5, 9, 4)), _data(rng, (3, 1001, 37))], [np.int8, np.uint8],
                                        ["tensor", "axis"]):
        attrs, s, z = _params(rng, mode, q, x.shape)
        model, feeds = build("QuantizeLinear", [("x", x), ("s", s), ("z", z)], attrs, out=[q], opset=13)
        got = _run(model, feeds, device)[0]
        np.testing.assert_array_equal(got, run_ort(model, feeds)[0])
        model, feeds = build("DequantizeLinear", [("q", got), ("s", s), ("z", z)], attrs, out=[np.float32], opset=13)
        np.testing.assert_array_equal(_run(model, feeds, device)[0], run_ort(model, feeds)[0])


@pytest.mark.parametrize("device", DEVICES)
def test_dequantize_int32(device, rng):
    x = rng.integers(-(2**30), 2**30, size=(4, 9), dtype=np.int32)
    s = _scales(rng, (4,))
    model, feeds = build("DequantizeLinear", [("x", x), ("s", s)], {"axis": 0}, out=[np.float32], opset=13)
    np.testing.assert_array_equal(_run(model, feeds, device)[0], run_ort(model, feeds)[0])


@pytest.mark.parametrize("device", DEVICES)
def test_dynamic_quantize_linear(device, rng):
    cases = [rng.standard_normal((3, 17)).astype(np.float32),
             np.abs(rng.standard_normal(9)).astype(np.float32) + 0.5,
             -np.abs(rng.standard_normal((2, 5, 7))).astype(np.float32),
             (rng.standard_normal(10007) * 20).astype(np.float32),
             np.zeros(5, np.float32)]
    for x in cases:
        model, feeds = build("DynamicQuantizeLinear", [("x", x)], out=[np.uint8, np.float32, np.uint8], opset=11)
        got, exp = _run(model, feeds, device), run_ort(model, feeds)
        np.testing.assert_array_equal(got[0], exp[0])
        np.testing.assert_array_equal(got[1], exp[1])
        np.testing.assert_array_equal(got[2], exp[2])


def _q8(rng, shape, dt):
    return rng.integers(np.iinfo(dt).min, np.iinfo(dt).max + 1, size=shape).astype(dt)


PAIRS = [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8), (np.int8, np.uint8)]
PAIR_IDS = ["u8u8", "u8s8", "s8s8", "s8u8"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("adt,bdt", PAIRS, ids=PAIR_IDS)
@pytest.mark.parametrize("case", ["2d", "batched", "per_row_col", "vector", "no_zero"])
def test_matmul_integer(device, rng, adt, bdt, case):
    a_shape, b_shape = {"2d": ((5, 13), (13, 7)), "batched": ((2, 1, 5, 13), (3, 13, 7)),
                        "per_row_col": ((3, 5, 13), (13, 7)), "vector": ((13,), (2, 13, 7)),
                        "no_zero": ((7, 3), (3, 11))}[case]
    a, b = _q8(rng, a_shape, adt), _q8(rng, b_shape, bdt)
    if case == "no_zero":
        inputs = [("a", a), ("b", b)]
        exp = a.astype(np.int64) @ b.astype(np.int64)
    else:
        za = _q8(rng, (5,) if case == "per_row_col" else (), adt)
        zb = _q8(rng, (7,) if case == "per_row_col" else (), bdt)
        inputs = [("a", a), ("b", b), ("za", za), ("zb", zb)]
        zan = za[:, None] if case == "per_row_col" else za
        exp = (a.astype(np.int64) - zan) @ (b.astype(np.int64) - zb)
    model, feeds = build("MatMulInteger", inputs, out=[np.int32], opset=10)
    np.testing.assert_array_equal(_run(model, feeds, device)[0], exp.astype(np.int32))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt", [np.uint8, np.int8], ids=["u8", "s8"])
@pytest.mark.parametrize("sdt", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("shapes", [((2, 6, 19), (19, 9)), ((5, 3), (3, 1, 3, 4)), ((17,), (17, 5))],
                         ids=["batched", "bcast", "vector"])
def test_qlinear_matmul(device, rng, dt, sdt, shapes):
    a, b = _q8(rng, shapes[0], dt), _q8(rng, shapes[1], dt)

    def s():
        return np.asarray(rng.random() * 0.05 + 0.001, sdt)

    def z():
        return _q8(rng, (), dt) // 4

    model, feeds = build("QLinearMatMul", [("a", a), ("sa", s()), ("za", z()), ("b", b), ("sb", s()), ("zb", z()),
                                           ("sy", np.asarray(0.05, sdt)), ("zy", z())], out=[dt], opset=21)
    np.testing.assert_array_equal(_run(model, feeds, device)[0], run_reference(model, feeds)[0])


def _conv_ref(x, w, xz, wz, group, pads, strides, dil):
    """int64 NumPy ConvInteger for 2-D (NCHW)."""
    x = x.astype(np.int64) - np.int64(xz)
    wz = np.asarray(wz, np.int64)
    w = w.astype(np.int64) - (wz.reshape(-1, 1, 1, 1) if wz.ndim else wz)
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xp = np.zeros((n, c, h + pads[0] + pads[2], wd + pads[1] + pads[3]), np.int64)
    xp[:, :, pads[0]:pads[0] + h, pads[1]:pads[1] + wd] = x
    oh = (xp.shape[2] - (dil[0] * (kh - 1) + 1)) // strides[0] + 1
    ow = (xp.shape[3] - (dil[1] * (kw - 1) + 1)) // strides[1] + 1
    y = np.zeros((n, m, oh, ow), np.int64)
    mg = m // group
    for o in range(m):
        g = o // mg
        for i in range(kh):
            for j in range(kw):
                patch = xp[:, g * cg:(g + 1) * cg, i * dil[0]:i * dil[0] + strides[0] * (oh - 1) + 1:strides[0],
                           j * dil[1]:j * dil[1] + strides[1] * (ow - 1) + 1:strides[1]]
                y[:, o] += np.einsum("nchw,c->nhw", patch, w[o, :, i, j])
    return y.astype(np.int32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("xdt,wdt", PAIRS, ids=PAIR_IDS)
@pytest.mark.parametrize("case", ["pads", "strided_dilated", "grouped_per_channel", "no_zero"])
def test_conv_integer(device, rng, xdt, wdt, case):
    group, pads, strides, dil = 1, [0, 0, 0, 0], [1, 1], [1, 1]
    xs, ws = (2, 3, 9, 8), (4, 3, 3, 3)
    if case == "pads":
        pads = [1, 2, 1, 0]
    elif case == "strided_dilated":
        strides, dil, pads = [2, 3], [2, 1], [1, 1, 2, 1]
    elif case == "grouped_per_channel":
        group, xs, ws, pads = 3, (1, 6, 7, 5), (9, 2, 3, 2), [1, 0, 1, 1]
    x, w = _q8(rng, xs, xdt), _q8(rng, ws, wdt)
    attrs = {"group": group, "pads": pads, "strides": strides, "dilations": dil}
    if case == "no_zero":
        inputs, xz, wz = [("x", x), ("w", w)], 0, np.int64(0)
    else:
        xz = _q8(rng, (), xdt)
        wz = _q8(rng, (ws[0],) if case == "grouped_per_channel" else (), wdt)
        inputs = [("x", x), ("w", w), ("xz", xz), ("wz", wz)]
    model, feeds = build("ConvInteger", inputs, attrs, out=[np.int32], opset=10)
    np.testing.assert_array_equal(_run(model, feeds, device)[0], _conv_ref(x, w, xz, wz, group, pads, strides, dil))


@pytest.mark.parametrize("device", DEVICES)
def test_conv_integer_1d_and_3d(device, rng):
    for xs, ws in [((2, 3, 11), (5, 3, 4)), ((1, 2, 4, 5, 3), (3, 2, 2, 3, 2))]:
        x, w = _q8(rng, xs, np.uint8), _q8(rng, ws, np.uint8)
        xz, wz = _q8(rng, (), np.uint8), _q8(rng, (), np.uint8)
        model, feeds = build("ConvInteger", [("x", x), ("w", w), ("xz", xz), ("wz", wz)], {}, out=[np.int32],
                             opset=10)
        np.testing.assert_array_equal(_run(model, feeds, device)[0], run_reference(model, feeds)[0])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("q", [np.int8, ml_dtypes.uint4, ml_dtypes.float8_e5m2], ids=_name)
def test_dequantize_e8m0_and_bfloat16_scales(device, rng, q):
    """A float8e8m0 scale (output_dtype float32, opset 23) and a bfloat16 scale, per axis."""
    shape = (4, 6, 3)
    x = _data(rng, shape)
    attrs, s, z = _params(rng, "axis", q, shape, big=_is_float_q(q))
    model, feeds = build("QuantizeLinear", [("x", x), ("s", s), ("z", z)], attrs, out=[q], opset=21)
    qx = _run(model, feeds, device)[0]
    e8 = (2.0 ** rng.integers(-8, 3, size=(6,))).astype(ml_dtypes.float8_e8m0fnu)
    model, feeds = build("DequantizeLinear", [("q", qx), ("s", e8), ("z", z)],
                         dict(attrs, output_dtype=TP.FLOAT), out=[np.float32], opset=23)
    same_bits(_run(model, feeds, device)[0], run_reference(model, feeds)[0])
    sb = s.astype(ml_dtypes.bfloat16)
    model, feeds = build("DequantizeLinear", [("q", qx), ("s", sb), ("z", z)], attrs, out=[ml_dtypes.bfloat16],
                         opset=21)
    same_bits(_run(model, feeds, device)[0], run_reference(model, feeds)[0])


@pytest.mark.parametrize("device", DEVICES)
def test_nonzero_float_zero_point_is_an_error(device, rng):
    """The CPU raises "must be zero"; a CUDA kernel sets the kernel error flag,
    reported at the next synchronisation as "... must be zero" too."""
    z = np.full(1, 2.0, ml_dtypes.float8_e4m3fn)
    model, feeds = build("DequantizeLinear", [("q", z), ("s", np.float32(1)), ("z", z)], out=[np.float32], opset=21)
    with pytest.raises(twinfer.Error, match="must be zero"):
        _run(model, feeds, device)
    x = _data(rng, (3, 5))
    model, feeds = build("QuantizeLinear", [("x", x), ("s", np.float32(1)), ("z", z)], out=[z.dtype], opset=21)
    with pytest.raises(twinfer.Error, match="must be zero"):
        _run(model, feeds, device)
