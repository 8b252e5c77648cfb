"""Quantization ops and the 8-bit float types (csrc/ops/quant/, core/float8.h,
Cast): Cast to/from FLOAT8* with saturate and E8M0 round modes, ml_dtypes
inputs from NumPy, QuantizeLinear / DequantizeLinear (per tensor, per axis,
blocked), DynamicQuantizeLinear, MatMulInteger, QLinearMatMul, ConvInteger and
QLinearConv against onnxruntime or the ONNX reference evaluator, on fresh
random data with odd sizes, plus the errors for bad inputs."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import twinfer
from onnx import TensorProto as TP
from op_cases import Const, build, expect_error, reference, run
from onnx_helpers import run_ort, run_reference

F8 = {
    TP.FLOAT8E4M3FN: ml_dtypes.float8_e4m3fn,
    TP.FLOAT8E4M3FNUZ: ml_dtypes.float8_e4m3fnuz,
    TP.FLOAT8E5M2: ml_dtypes.float8_e5m2,
    TP.FLOAT8E5M2FNUZ: ml_dtypes.float8_e5m2fnuz,
}
F8_IDS = ["e4m3fn", "e4m3fnuz", "e5m2", "e5m2fnuz"]


def same_bits(got, exp):
    """Equal float arrays (any width): same bits, or both NaN."""
    got, exp = np.asarray(got), np.asarray(exp)
    assert got.dtype == exp.dtype and got.shape == exp.shape
    g, e = got.astype(np.float32), exp.astype(np.float32)
    u = np.dtype(f"u{got.itemsize}")
    bits = got.view(u) == exp.view(u)
    ok = bits | (np.isnan(g) & np.isnan(e))
    assert ok.all(), f"{(~ok).sum()} differ, e.g. got {got[~ok][:5]} expected {exp[~ok][:5]}"


def wide_floats(rng, n):
    """Normal data over many binades plus the special values and float8 edges."""
    x = rng.standard_normal(n) * 10.0 ** rng.integers(-7, 6, n)
    edges = [0.0, -0.0, np.inf, -np.inf, np.nan, 448, 464, 470, 480, -500, 240, 248, 57344, 61440, 65536, 1e-9]
    return np.concatenate([x, edges]).astype(np.float32)


# ---------------------------------------------------------------------------
# Cast
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("to", list(F8), ids=F8_IDS)
@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("src", [np.float32, np.float16, ml_dtypes.bfloat16], ids=["f32", "f16", "bf16"])
def test_cast_to_float8(rng, to, saturate, src):
    with np.errstate(over="ignore"):
        x = wide_floats(rng, 997).astype(src)
    model, feeds = build("Cast", [("x", x)], {"to": to, "saturate": saturate}, out=[F8[to]], opset=21)
    same_bits(run(model, feeds)[0], run_reference(model, feeds)[0])


@pytest.mark.parametrize("frm", list(F8) + [TP.FLOAT8E8M0], ids=F8_IDS + ["e8m0"])
@pytest.mark.parametrize("to", [np.float32, np.float16, ml_dtypes.bfloat16], ids=["f32", "f16", "bf16"])
def test_cast_from_float8_all_codes(frm, to):
    dt = F8.get(frm, ml_dtypes.float8_e8m0fnu)
    x = np.arange(256, dtype=np.uint8).view(dt).reshape(16, 16)
    model, feeds = build("Cast", [("x", x)], {"to": {np.float32: TP.FLOAT, np.float16: TP.FLOAT16}.get(to, TP.BFLOAT16)},
                         out=[to], opset=25)
    same_bits(run(model, feeds)[0], x.astype(np.float32).astype(to))


@pytest.mark.parametrize("mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [1, 0])
def test_cast_to_e8m0(rng, mode, saturate):
    x = np.abs(wide_floats(rng, 501))
    x = np.concatenate([x, np.float32([2.0**127 * 1.5, 2.0**-127, 2.0**-130, 3.0, 6.0, 0.75])])
    model, feeds = build("Cast", [("x", x)], {"to": TP.FLOAT8E8M0, "saturate": saturate, "round_mode": mode},
                         out=[ml_dtypes.float8_e8m0fnu], opset=25)
    same_bits(run(model, feeds)[0], run_reference(model, feeds)[0])


def test_castlike_float8_and_between_float8(rng):
    x = wide_floats(rng, 301)
    like = np.zeros(1, ml_dtypes.float8_e5m2)
    model, feeds = build("CastLike", [("x", x), ("like", like)], {"saturate": 0}, out=[like.dtype], opset=21)
    same_bits(run(model, feeds)[0], run_reference(model, feeds)[0])
    y = x.astype(ml_dtypes.float8_e4m3fn)
    model, feeds = build("Cast", [("x", y)], {"to": TP.FLOAT8E5M2FNUZ}, out=[ml_dtypes.float8_e5m2fnuz], opset=21)
    same_bits(run(model, feeds)[0], run_reference(model, feeds)[0])


def test_bfloat16_and_float8_numpy_inputs(rng):
    """ml_dtypes arrays (which DLPack cannot carry) go in through a same-width view,
    also strided and read-only ones."""
    x = rng.standard_normal((7, 9)).astype(ml_dtypes.bfloat16)[:, ::2]
    model, feeds = build("Cast", [("x", np.ascontiguousarray(x))], {"to": TP.FLOAT}, out=[np.float32])
    np.testing.assert_array_equal(run(model, {"x": x})[0], x.astype(np.float32))
    t = twinfer.as_tensor(x)
    assert t.dtype == "bfloat16" and t.shape == x.shape
    y = rng.standard_normal(13).astype(ml_dtypes.float8_e4m3fn)
    y.flags.writeable = False
    t = twinfer.as_tensor(y)
    assert t.dtype == "float8_e4m3fn"
    same_bits(t.numpy(), y)


# ---------------------------------------------------------------------------
# QuantizeLinear / DequantizeLinear
# ---------------------------------------------------------------------------
INT_Q = [np.uint8, np.int8, np.uint16, np.int16]


def zp_of(rng, dt, shape):
    info = np.iinfo(dt)
    lo, hi = max(info.min, -20), min(info.max, 20) + 1
    return rng.integers(lo if info.min < 0 else 0, hi, size=shape).astype(dt)


def scales(rng, shape, dtype=np.float32):
    return (rng.random(shape) * 0.2 + 0.01).astype(dtype)


@pytest.mark.parametrize("dt", INT_Q, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("mode", ["tensor", "axis", "blocked"])
def test_quantize_dequantize_int(rng, dt, mode):
    x = (rng.standard_normal((3, 7, 5)) * 4).astype(np.float32)
    attrs = {}
    if mode == "tensor":
        s, z = scales(rng, ()), zp_of(rng, dt, ())
    elif mode == "axis":
        s, z = scales(rng, (7,)), zp_of(rng, dt, (7,))
    else:
        attrs = {"axis": 1, "block_size": 3}
        s, z = scales(rng, (3, 3, 5)), zp_of(rng, dt, (3, 3, 5))
    model, feeds = build("QuantizeLinear", [("x", x), ("s", Const(s)), ("z", Const(z))], attrs, out=[dt], opset=21)
    q = run(model, feeds)[0]
    np.testing.assert_array_equal(q, reference(model, feeds)[0])
    model, feeds = build("DequantizeLinear", [("q", q), ("s", s), ("z", z)], attrs, out=[np.float32], opset=21)
    np.testing.assert_allclose(run(model, feeds)[0], reference(model, feeds)[0], rtol=1e-6, atol=0)


@pytest.mark.parametrize("xdt", [np.float16, ml_dtypes.bfloat16, np.int32], ids=["f16", "bf16", "i32"])
def test_quantize_other_inputs_and_defaults(rng, xdt):
    """float16/bfloat16/int32 x (division in the scale's precision), no zero
    point (uint8 output) and opset 10 (per tensor only)."""
    x = (rng.standard_normal(41) * 30).astype(xdt)
    sdt = np.float32 if xdt == np.int32 else xdt
    s = scales(rng, (), sdt)
    model, feeds = build("QuantizeLinear", [("x", x), ("s", s)], out=[np.uint8], opset=21)
    np.testing.assert_array_equal(run(model, feeds)[0], run_reference(model, feeds)[0])
    if xdt == np.int32:
        model, feeds = build("QuantizeLinear", [("x", x.astype(np.float32)), ("s", s)], out=[np.uint8], opset=10)
        np.testing.assert_array_equal(run(model, feeds)[0], run_ort(model, feeds)[0])


@pytest.mark.parametrize("to", list(F8), ids=F8_IDS)
@pytest.mark.parametrize("saturate", [1, 0])
def test_quantize_dequantize_float8(rng, to, saturate):
    x = (rng.standard_normal((5, 11)) * 300).astype(np.float32)
    s = scales(rng, (11,))
    z = np.zeros(11, F8[to])
    model, feeds = build("QuantizeLinear", [("x", x), ("s", s), ("z", z)], {"axis": 1, "saturate": saturate},
                         out=[F8[to]], opset=21)
    q = run(model, feeds)[0]
    same_bits(q, run_reference(model, feeds)[0])
    model, feeds = build("DequantizeLinear", [("q", q), ("s", s.astype(np.float16))], {"axis": -1},
                         out=[np.float16], opset=21)
    same_bits(run(model, feeds)[0], run_reference(model, feeds)[0])


def test_dequantize_int32_and_output_dtype(rng):
    x = rng.integers(-(2**30), 2**30, size=(4, 9), dtype=np.int32)
    s = scales(rng, (4,))
    model, feeds = build("DequantizeLinear", [("x", x), ("s", s)], {"axis": 0}, out=[np.float32], opset=13)
    np.testing.assert_array_equal(run(model, feeds)[0], run_ort(model, feeds)[0])
    q = rng.integers(0, 255, size=(6, 7), dtype=np.uint8)
    model, feeds = build("DequantizeLinear", [("q", q), ("s", scales(rng, ()))], {"output_dtype": TP.FLOAT16},
                         out=[np.float16], opset=23)
    same_bits(run(model, feeds)[0], run_reference(model, feeds)[0])


def test_dynamic_quantize_linear(rng):
    for x in [rng.standard_normal((3, 17)).astype(np.float32), np.abs(rng.standard_normal(9)).astype(np.float32),
              np.zeros(5, np.float32)]:
        # onnxruntime: scale 1 when x is all zeros (the reference evaluator gives 1/255).
        model, feeds = build("DynamicQuantizeLinear", [("x", x)], out=[np.uint8, np.float32, np.uint8], opset=11)
        got, exp = run(model, feeds), run_ort(model, feeds)
        np.testing.assert_array_equal(got[0], exp[0])
        np.testing.assert_allclose(got[1], exp[1], rtol=1e-7)
        np.testing.assert_array_equal(got[2], exp[2])


def test_quantize_errors(rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    model, feeds = build("QuantizeLinear", [("x", x), ("s", Const(scales(rng, (5,)))), ("z", Const(np.zeros(5, np.uint8)))],
                         out=[np.uint8], opset=13)
    expect_error(model, feeds, "per-axis", kind=twinfer.ShapeError)
    model, feeds = build("QuantizeLinear", [("x", x), ("s", Const(scales(rng, (3, 3)))), ("z", Const(np.zeros((3, 3), np.uint8)))],
                         {"axis": 1, "block_size": 3}, out=[np.uint8], opset=21)
    expect_error(model, feeds, "blocked", kind=twinfer.ShapeError)
    z = np.full(1, 2.0, ml_dtypes.float8_e4m3fn)
    model, feeds = build("DequantizeLinear", [("q", z), ("s", np.float32(1)), ("z", z)], out=[np.float32], opset=21)
    expect_error(model, feeds, "must be zero")
    model, feeds = build("QuantizeLinear", [("x", x), ("s", np.float32(1))], {"output_dtype": TP.INT64},
                         out=[np.int64], opset=21)
    expect_error(model, feeds, "output_dtype")


# ---------------------------------------------------------------------------
# MatMulInteger / QLinearMatMul
# ---------------------------------------------------------------------------
def q8(rng, shape, dt):
    return rng.integers(np.iinfo(dt).min, np.iinfo(dt).max + 1, size=shape).astype(dt)


@pytest.mark.parametrize("adt,bdt", [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8), (np.int8, np.uint8)],
                         ids=["u8u8", "u8s8", "s8s8", "s8u8"])
@pytest.mark.parametrize("case", ["2d", "batched", "per_row_col", "const_b", "vector", "wide", "wide_const"])
def test_matmul_integer(rng, adt, bdt, case):
    # "wide": more columns than one block of the column sums (256) and rows
    # enough to split the correction across threads.
    a_shape, b_shape = {"2d": ((5, 13), (13, 7)), "batched": ((2, 1, 5, 13), (3, 13, 7)),
                        "per_row_col": ((5, 13), (13, 7)), "const_b": ((3, 5, 13), (13, 7)),
                        "vector": ((13,), (2, 13, 7)), "wide": ((2, 37, 61), (2, 61, 601)),
                        "wide_const": ((3, 41, 67), (67, 533))}[case]
    a, b = q8(rng, a_shape, adt), q8(rng, b_shape, bdt)
    za = q8(rng, (5,) if case == "per_row_col" else (), adt)
    zb = q8(rng, (7,) if case == "per_row_col" else (), bdt)
    b_in = Const(b) if case.endswith("const_b") or case == "wide_const" else b
    model, feeds = build("MatMulInteger", [("a", a), ("b", b_in), ("za", za), ("zb", zb)], out=[np.int32], opset=10)
    if case == "per_row_col":  # the reference evaluator broadcasts a per-row zero point wrongly
        exp = (a.astype(np.int64) - za[:, None]) @ (b.astype(np.int64) - zb)
    else:
        exp = run_reference(model, feeds)[0]
    np.testing.assert_array_equal(run(model, feeds)[0], exp)
    model, feeds = build("MatMulInteger", [("a", a), ("b", b_in)], out=[np.int32], opset=10)
    np.testing.assert_array_equal(run(model, feeds)[0], run_reference(model, feeds)[0])


@pytest.mark.parametrize("dt", [np.uint8, np.int8], ids=["u8", "s8"])
@pytest.mark.parametrize("sdt", [np.float32, np.float16], ids=["f32", "f16"])
def test_qlinear_matmul(rng, dt, sdt):
    a, b = q8(rng, (2, 6, 19), dt), q8(rng, (19, 9), dt)
    s = lambda: np.asarray(rng.random() * 0.05 + 0.001, sdt)  # noqa: E731
    z = lambda: q8(rng, (), dt) // 4  # noqa: E731
    model, feeds = build("QLinearMatMul", [("a", a), ("sa", s()), ("za", z()), ("b", Const(b)), ("sb", s()),
                                           ("zb", z()), ("sy", np.asarray(0.05, sdt)), ("zy", z())], out=[dt], opset=21)
    np.testing.assert_array_equal(run(model, feeds)[0], run_reference(model, feeds)[0])


def test_matmul_integer_errors(rng):
    model, feeds = build("MatMulInteger", [("a", q8(rng, (3, 4), np.uint8)), ("b", q8(rng, (5, 2), np.uint8))],
                         out=[np.int32], opset=10)
    expect_error(model, feeds, "inner", kind=twinfer.ShapeError)
    model, feeds = build("MatMulInteger", [("a", rng.standard_normal((3, 4)).astype(np.float32)),
                                           ("b", q8(rng, (4, 2), np.uint8))], out=[np.int32], opset=10)
    expect_error(model, feeds, "int8/uint8", kind=twinfer.DTypeError)
    model, feeds = build("MatMulInteger", [("a", q8(rng, (3, 4), np.uint8)), ("b", q8(rng, (4, 2), np.uint8)),
                                           ("za", q8(rng, (2,), np.uint8))], out=[np.int32], opset=10)
    expect_error(model, feeds, "a_zero_point", kind=twinfer.ShapeError)


# ---------------------------------------------------------------------------
# ConvInteger / QLinearConv
# ---------------------------------------------------------------------------
CONV_CASES = {
    "pads": ((1, 3, 9, 8), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    "stride_dil": ((2, 2, 11, 10), (3, 2, 3, 2), {"strides": [2, 1], "dilations": [1, 2], "pads": [0, 1, 2, 0]}),
    "group": ((1, 4, 7, 7), (6, 2, 3, 3), {"group": 2, "auto_pad": "SAME_UPPER"}),
    "conv1d": ((2, 3, 13), (5, 3, 4), {"pads": [2, 1]}),
    "conv3d": ((1, 2, 5, 6, 4), (3, 2, 2, 3, 2), {}),
    "wide": ((2, 3, 23, 29), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}),  # 667 output pixels: several column blocks
    # Along the last dim (im2col copies the run between the pads): a stride
    # and dilation with pads wider than the kernel, and a kernel wider than x.
    "stride_w": ((1, 2, 7, 12), (3, 2, 2, 3), {"strides": [1, 3], "dilations": [2, 2], "pads": [1, 4, 2, 3]}),
    "narrow": ((1, 2, 5, 2), (2, 2, 3, 5), {"strides": [2, 2], "pads": [1, 3, 1, 3]}),
}


@pytest.mark.parametrize("case", list(CONV_CASES))
@pytest.mark.parametrize("xdt,wdt", [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8)],
                         ids=["u8u8", "u8s8", "s8s8"])
def test_conv_integer(rng, case, xdt, wdt):
    xs, ws, attrs = CONV_CASES[case]
    x, w = q8(rng, xs, xdt), q8(rng, ws, wdt)
    xz = q8(rng, (), xdt)
    wz = q8(rng, (ws[0],), wdt) if case == "pads" else q8(rng, (), wdt)
    model, feeds = build("ConvInteger", [("x", x), ("w", Const(w)), ("xz", xz), ("wz", wz)], attrs, out=[np.int32],
                         opset=10)
    np.testing.assert_array_equal(run(model, feeds)[0], run_reference(model, feeds)[0])


@pytest.mark.parametrize("case", list(CONV_CASES))
@pytest.mark.parametrize("dt", [np.uint8, np.int8], ids=["u8", "s8"])
def test_qlinear_conv(rng, case, dt):
    xs, ws, attrs = CONV_CASES[case]
    m = ws[0]
    x, w = q8(rng, xs, dt), q8(rng, ws, np.int8)
    # Per-channel w_scale for 2-D convs (the reference evaluator reshapes it for 2-D only).
    w_scale = rng.random(m) * 0.02 + 0.001 if len(xs) == 4 else 0.01
    f = lambda v: np.asarray(v, np.float32)  # noqa: E731
    inputs = [("x", x), ("xs", f(0.02)), ("xz", q8(rng, (), dt) // 4), ("w", Const(w)),
              ("ws", f(w_scale)), ("wz", np.zeros(m, np.int8)), ("ys", f(0.3)),
              ("yz", q8(rng, (), dt) // 4), ("b", Const(rng.integers(-500, 500, m).astype(np.int32)))]
    model, feeds = build("QLinearConv", inputs, attrs, out=[dt], opset=10)
    np.testing.assert_array_equal(run(model, feeds)[0], run_reference(model, feeds)[0])


def test_qlinear_conv_errors(rng):
    x, w = q8(rng, (1, 3, 5, 5), np.uint8), q8(rng, (2, 3, 3, 3), np.uint8)
    f = lambda v: np.asarray(v, np.float32)  # noqa: E731
    inputs = [("x", x), ("xs", f(0.02)), ("xz", np.uint8(1)), ("w", w), ("ws", f([0.1, 0.2, 0.3])),
              ("wz", np.uint8(0)), ("ys", f(0.3)), ("yz", np.uint8(3))]
    model, feeds = build("QLinearConv", inputs, out=[np.uint8], opset=10)
    expect_error(model, feeds, "w_scale", kind=twinfer.ShapeError)
    model, feeds = build("ConvInteger", [("x", x), ("w", q8(rng, (2, 4, 3, 3), np.uint8))], out=[np.int32], opset=10)
    expect_error(model, feeds, "channels", kind=twinfer.ShapeError)
