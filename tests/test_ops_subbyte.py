"""The 4-bit and 2-bit types (INT4, UINT4, FLOAT4E2M1, INT2, UINT2; core/subbyte.h):
stored unpacked, one per byte, as ml_dtypes holds them. Checked here: the ONNX
reader's unpacking (raw_data, int32_data, external data, odd counts, bad
sizes), NumPy in/out, Cast/CastLike to and from every type, QuantizeLinear /
DequantizeLinear (per tensor, per axis, blocked) and data-movement ops, against
the ONNX reference evaluator (whose arithmetic is ml_dtypes') and onnxruntime
where it has the kernel, on fresh random data with odd sizes."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
import twinfer
from onnx import TensorProto as TP
from onnx import helper, numpy_helper
from onnx_helpers import make_model, run_ort, run_reference
from op_cases import Const, build, expect_error, run

SUB = {
    TP.INT4: ml_dtypes.int4,
    TP.UINT4: ml_dtypes.uint4,
    TP.FLOAT4E2M1: ml_dtypes.float4_e2m1fn,
    TP.INT2: ml_dtypes.int2,
    TP.UINT2: ml_dtypes.uint2,
}
SUB_IDS = ["int4", "uint4", "float4", "int2", "uint2"]
BITS = {TP.INT4: 4, TP.UINT4: 4, TP.FLOAT4E2M1: 4, TP.INT2: 2, TP.UINT2: 2}
INT_SUB = [TP.INT4, TP.UINT4, TP.INT2, TP.UINT2]
INT_SUB_IDS = ["int4", "uint4", "int2", "uint2"]

# Every type Cast handles besides the sub-byte ones.
OTHER = [np.float32, np.float64, np.float16, ml_dtypes.bfloat16, np.int8, np.uint8, np.int16, np.uint16,
         np.int32, np.uint32, np.int64, np.uint64, np.bool_, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2]
OTHER_IDS = [np.dtype(t).name for t in OTHER]


def onnx_type(dt) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dt))


def same_bits(got, exp):
    """Same dtype, shape and stored bytes (sub-byte values sit in the low bits)."""
    got, exp = np.asarray(got), np.asarray(exp)
    assert got.dtype == exp.dtype, (got.dtype, exp.dtype)
    assert got.shape == exp.shape
    if got.dtype.kind == "f" or got.dtype.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        g, e = got.astype(np.float32), exp.astype(np.float32)
        u = np.dtype(f"u{got.itemsize}")
        ok = (got.view(u) == exp.view(u)) | (np.isnan(g) & np.isnan(e))
    else:
        ok = got.view(np.uint8 if got.itemsize == 1 else f"u{got.itemsize}") == exp.view(
            np.uint8 if exp.itemsize == 1 else f"u{exp.itemsize}")
    assert ok.all(), f"{(~ok).sum()} differ, e.g. got {got[~ok][:6]} expected {exp[~ok][:6]}"


def all_codes(to, shape=None):
    """Every stored value of a sub-byte type (each code a few times), shuffled by shape."""
    n = 1 << BITS[to]
    codes = np.tile(np.arange(n, dtype=np.uint8), 3)
    return codes.view(SUB[to]) if shape is None else codes.view(SUB[to])[: int(np.prod(shape))].reshape(shape)


def random_sub(rng, to, shape):
    """Fresh random values of a sub-byte type."""
    return rng.integers(0, 1 << BITS[to], size=shape, dtype=np.uint8).view(SUB[to])


def source_values(rng, dt, n):
    """Random values of `dt` covering what matters for casting into 4/2 bits:
    in-range and wrapping integers, halves (rounding ties), large and special floats."""
    dt = np.dtype(dt)
    if dt == np.bool_:
        return rng.random(n) < 0.5
    if dt.kind in "iu":
        info = np.iinfo(dt)
        v = rng.integers(max(info.min, -40), min(info.max, 40), size=n, endpoint=True).astype(dt)
        return np.concatenate([v, np.array([info.min, info.max, 0, 1], dtype=dt)])
    edges = [0.0, -0.0, 6.0, -6.0, 7.0, 5.0, 0.25, 0.75, 1.25, 100.0, -100.0, 1e-30, np.inf, -np.inf, np.nan]
    x = np.concatenate([rng.standard_normal(n) * 4, rng.integers(-20, 20, n) * 0.5, rng.integers(-20, 20, n) * 0.25,
                        edges])
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(dt)


# ---------------------------------------------------------------------------
# The ONNX reader: packed -> one per byte
# ---------------------------------------------------------------------------
def _identity_model(init, elem, shape):
    # A one-input Concat passes the value through (Identity's kernel takes only
    # the arithmetic types, and the optimizer would remove it anyway).
    return make_model([helper.make_node("Concat", ["w"], ["y"], name="id", axis=0)], [],
                      [helper.make_tensor_value_info("y", elem, shape)], [init])


@pytest.mark.parametrize("elem", list(SUB), ids=SUB_IDS)
@pytest.mark.parametrize("shape", [(7,), (3, 5), (1,), (2, 3, 3), (0, 4)], ids=str)
@pytest.mark.parametrize("raw", [True, False], ids=["raw_data", "int32_data"])
def test_initializer_unpacked(rng, elem, shape, raw):
    """raw_data and int32_data (both packed, low bits first, odd counts padded)
    read to the values onnx's numpy_helper reads from the same TensorProto."""
    vals = random_sub(rng, elem, shape)
    if raw:
        t = numpy_helper.from_array(vals, "w")
        assert t.HasField("raw_data") or vals.size == 0
    else:
        t = helper.make_tensor("w", elem, shape, vals.astype(np.float32).flatten().tolist())
        assert not t.HasField("raw_data")
    want = numpy_helper.to_array(t)
    y = twinfer.load(_identity_model(t, elem, list(shape)), device="cpu", optimize=False).run({})["y"]
    assert y.dtype == np.dtype(SUB[elem]).name and y.nbytes == vals.size  # one byte each
    same_bits(y.numpy(), want)


@pytest.mark.parametrize("elem", list(SUB), ids=SUB_IDS)
def test_initializer_external_data(tmp_path, rng, elem):
    vals = random_sub(rng, elem, (5, 7))
    model = _identity_model(numpy_helper.from_array(vals, "w"), elem, [5, 7])
    path = tmp_path / "m.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="w.bin", size_threshold=0)
    assert onnx.load(str(path), load_external_data=False).graph.initializer[0].data_location == TP.EXTERNAL
    same_bits(twinfer.load(str(path), device="cpu", optimize=False).run({})["y"].numpy(), vals)


@pytest.mark.parametrize("elem,nbytes", [(TP.INT4, 3), (TP.INT4, 5), (TP.UINT2, 1), (TP.FLOAT4E2M1, 7)])
def test_packed_size_mismatch(elem, nbytes):
    """7 4-bit values need 4 packed bytes, 7 2-bit values need 2: anything else is refused, naming the tensor."""
    t = TP(name="w_bad", data_type=elem, dims=[7], raw_data=b"\x11" * nbytes)
    with pytest.raises(twinfer.ModelFormatError, match=f"w_bad.*raw_data has {nbytes} bytes.*packed"):
        twinfer.load(_identity_model(t, elem, [7]), device="cpu")
    t = TP(name="w_few", data_type=elem, dims=[7], int32_data=[1] * nbytes)
    with pytest.raises(twinfer.ModelFormatError, match="w_few.*int32_data has"):
        twinfer.load(_identity_model(t, elem, [7]), device="cpu")


def test_int32_data_entry_not_a_byte():
    t = TP(name="w_big", data_type=TP.INT4, dims=[3], int32_data=[0x12, 0x345])
    with pytest.raises(twinfer.ModelFormatError, match="w_big.*packed byte"):
        twinfer.load(_identity_model(t, TP.INT4, [3]), device="cpu")


# ---------------------------------------------------------------------------
# NumPy in and out
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("elem", list(SUB), ids=SUB_IDS)
def test_numpy_round_trip(rng, elem):
    """ml_dtypes arrays go in through a uint8 view (also strided and read-only
    ones) and come back as ml_dtypes arrays over the same bytes."""
    x = random_sub(rng, elem, (9, 11))
    t = twinfer.as_tensor(x)
    assert t.dtype == np.dtype(SUB[elem]).name and t.shape == x.shape and t.nbytes == x.size
    same_bits(t.numpy(), x)
    s = x[:, ::3]
    same_bits(twinfer.as_tensor(s).numpy(), s)
    r = x.copy()
    r.flags.writeable = False
    same_bits(twinfer.as_tensor(r).numpy(), r)
    model, feeds = build("Concat", [("x", x)], {"axis": 1}, opset=21)
    same_bits(run(model, feeds)[0], x)


# ---------------------------------------------------------------------------
# Cast / CastLike
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("to", list(SUB), ids=SUB_IDS)
@pytest.mark.parametrize("src", OTHER, ids=OTHER_IDS)
def test_cast_to_subbyte(rng, to, src):
    x = source_values(rng, src, 101)
    if np.dtype(src).kind in "fV" and to in INT_SUB:
        # Float -> int4 of inf/NaN/huge is undefined in ONNX (and platform-dependent
        # in the reference); twinfer gives 0, as the reference on x86. Compare the rest.
        with np.errstate(invalid="ignore"):
            f = x.astype(np.float64)
        x = x[np.isfinite(f) & (np.abs(f) < 2**31)]
    model, feeds = build("Cast", [("x", x)], {"to": to}, out=[SUB[to]], opset=25)
    same_bits(run(model, feeds)[0], run_reference(model, feeds)[0])


@pytest.mark.parametrize("frm", list(SUB), ids=SUB_IDS)
@pytest.mark.parametrize("to", OTHER + [v for v in SUB.values()], ids=OTHER_IDS + ["to_" + i for i in SUB_IDS])
def test_cast_from_subbyte_all_codes(frm, to):
    """Every stored code of the source, to every type, as ml_dtypes casts it."""
    x = all_codes(frm, (3, 1 << BITS[frm]))
    if frm == TP.FLOAT4E2M1 and np.dtype(to).kind == "u":
        # Negative float -> unsigned is undefined in ONNX: twinfer saturates to 0
        # as it does from float32, ml_dtypes wraps. Compare the defined part.
        x = x[:, : 1 << (BITS[frm] - 1)]
    model, feeds = build("Cast", [("x", x)], {"to": onnx_type(to)}, out=[to], opset=25)
    got = run(model, feeds)[0]
    if frm in INT_SUB and to in (ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.uint2):
        # ml_dtypes (so the reference) has no cast between its 4/2-bit integer
        # types: through int64 it is the same wrap.
        same_bits(got, x.astype(np.int64).astype(to))
        return
    exp = run_reference(model, feeds)[0]
    same_bits(got, exp)
    # The reference is ml_dtypes: say so independently for the value-preserving targets.
    if np.dtype(to) in (np.float32, np.float64):
        np.testing.assert_array_equal(exp, x.astype(np.float32).astype(to))


def test_cast_to_subbyte_edges():
    """The rules spelled out: ints wrap, floats truncate then wrap, float4 rounds
    to nearest even and saturates, NaN / beyond-int32 give 0 for the integers."""
    x = np.float32([-9, 8, 15.9, -2.5, 7.6, 2.5, np.nan, np.inf, -3e9, 0.25, 0.75, 5, 7, 1e6, -0.0, -1e-9])
    model, feeds = build("Cast", [("x", x)], {"to": TP.INT4}, out=[ml_dtypes.int4], opset=25)
    np.testing.assert_array_equal(run(model, feeds)[0].astype(np.int8),
                                  [7, -8, -1, -2, 7, 2, 0, 0, 0, 0, 0, 5, 7, 0, 0, 0])
    model, feeds = build("Cast", [("x", x)], {"to": TP.FLOAT4E2M1}, out=[ml_dtypes.float4_e2m1fn], opset=25)
    got = run(model, feeds)[0]
    np.testing.assert_array_equal(got.astype(np.float32)[[0, 1, 2, 3, 4, 5, 9, 10, 11, 12, 13]],
                                  [-6, 6, 6, -2, 6, 2, 0, 1, 4, 6, 6])
    assert got.view(np.uint8)[14] == 0x8  # -0 kept
    i = np.int32([-9, 8, 300, -3, 1, 2])
    model, feeds = build("Cast", [("x", i)], {"to": TP.UINT2}, out=[ml_dtypes.uint2], opset=25)
    np.testing.assert_array_equal(run(model, feeds)[0].astype(np.int8), [3, 0, 0, 1, 1, 2])


@pytest.mark.parametrize("like", list(SUB), ids=SUB_IDS)
def test_castlike(rng, like):
    x = (rng.standard_normal((5, 7)) * 3).astype(np.float16)
    model, feeds = build("CastLike", [("x", x), ("like", np.zeros(1, SUB[like]))], out=[SUB[like]], opset=25)
    same_bits(run(model, feeds)[0], run_reference(model, feeds)[0])
    q = random_sub(rng, like, (4, 9))
    model, feeds = build("CastLike", [("q", q), ("like", np.zeros(2, np.float32))], out=[np.float32], opset=25)
    same_bits(run(model, feeds)[0], q.astype(np.float32))


def test_cast_saturate_attribute_ignored_for_float4():
    """saturate only concerns the 8-bit floats; float4 always saturates (it has no inf)."""
    x = np.float32([1e6, -np.inf, 6.5, -7.0, 3.1])
    model, feeds = build("Cast", [("x", x)], {"to": TP.FLOAT4E2M1, "saturate": 0}, out=[ml_dtypes.float4_e2m1fn],
                         opset=25)
    np.testing.assert_array_equal(run(model, feeds)[0].astype(np.float32), [6, -6, 6, -6, 3])


# ---------------------------------------------------------------------------
# QuantizeLinear / DequantizeLinear
# ---------------------------------------------------------------------------
def zero_points(rng, elem, shape):
    if elem == TP.FLOAT4E2M1:
        return np.zeros(shape, ml_dtypes.float4_e2m1fn)
    dt = SUB[elem]
    lo, hi = int(ml_dtypes.iinfo(dt).min), int(ml_dtypes.iinfo(dt).max)
    return rng.integers(lo, hi, size=shape, endpoint=True).astype(dt)


@pytest.mark.parametrize("elem", list(SUB), ids=SUB_IDS)
@pytest.mark.parametrize("mode", ["tensor", "axis", "blocked"])
def test_quantize_dequantize(rng, elem, mode):
    x = (rng.standard_normal((3, 7, 5)) * 2).astype(np.float32)
    # Saturation (NaN and values beyond int32 are undefined for integer outputs:
    # the reference wraps through int32, twinfer saturates).
    x.flat[:5] = [100.0, -100.0, 0.0, 1e4, -1e4]
    attrs = {}
    if mode == "tensor":
        s, z = (rng.random(()) * 0.5 + 0.1).astype(np.float32), zero_points(rng, elem, ())
    elif mode == "axis":
        s, z = (rng.random(7) * 0.5 + 0.1).astype(np.float32), zero_points(rng, elem, (7,))
    else:
        attrs = {"axis": 1, "block_size": 3}
        s, z = (rng.random((3, 3, 5)) * 0.5 + 0.1).astype(np.float32), zero_points(rng, elem, (3, 3, 5))
    model, feeds = build("QuantizeLinear", [("x", x), ("s", Const(s)), ("z", Const(z))], attrs, out=[SUB[elem]],
                         opset=21)
    q = run(model, feeds)[0]
    same_bits(q, run_reference(model, feeds)[0])
    model, feeds = build("DequantizeLinear", [("q", q), ("s", s), ("z", z)], attrs, out=[np.float32], opset=21)
    got = run(model, feeds)[0]
    np.testing.assert_array_equal(got, run_reference(model, feeds)[0])
    if elem != TP.FLOAT4E2M1 and mode != "blocked":
        # An independent check of the integer path: (q - z) * s in float32.
        axis_s = s.reshape(-1, 1) if mode == "axis" else s
        axis_z = z.astype(np.int32).reshape(-1, 1) if mode == "axis" else z.astype(np.int32)
        np.testing.assert_array_equal(got, ((q.astype(np.int32) - axis_z) * axis_s).astype(np.float32))


@pytest.mark.parametrize("elem", [TP.INT4, TP.UINT4], ids=["int4", "uint4"])
def test_quantize_dequantize_match_onnxruntime(rng, elem):
    """onnxruntime has int4/uint4 QuantizeLinear/DequantizeLinear kernels (opset 21,
    per axis). Its Python API cannot hand out int4 arrays, so its quantized
    output is widened by a Cast to int8 inside the model."""
    x = (rng.standard_normal((5, 9)) * 3).astype(np.float32)
    s = (rng.random(9) * 0.5 + 0.1).astype(np.float32)
    z = zero_points(rng, elem, (9,))
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="ql", axis=1),
             helper.make_node("Cast", ["q"], ["q8"], name="widen", to=TP.INT8)]
    inits = [numpy_helper.from_array(s, "s"), numpy_helper.from_array(z, "z")]
    model = make_model(nodes, [("x", np.float32, [5, 9])], [("q8", np.int8, [5, 9])], inits, opset=21)
    got = run(model, {"x": x})[0]
    np.testing.assert_array_equal(got, run_ort(model, {"x": x})[0])
    q = got.astype(SUB[elem])
    model, feeds = build("DequantizeLinear", [("q", Const(q)), ("s", Const(s)), ("z", Const(z))], {"axis": 1},
                         out=[np.float32], opset=21)
    np.testing.assert_array_equal(run(model, feeds)[0], run_ort(model, feeds)[0])


@pytest.mark.parametrize("elem", list(SUB), ids=SUB_IDS)
def test_quantize_output_dtype_without_zero_point(rng, elem):
    """output_dtype picks the type when there is no zero point (zero point 0)."""
    x = (rng.standard_normal((4, 13)) * 3).astype(np.float32)
    s = np.float32(0.37)
    model, feeds = build("QuantizeLinear", [("x", x), ("s", Const(s))], {"output_dtype": elem}, out=[SUB[elem]],
                         opset=21)
    q = run(model, feeds)[0]
    same_bits(q, run_reference(model, feeds)[0])
    model, feeds = build("DequantizeLinear", [("q", q), ("s", Const(s))], out=[np.float32], opset=21)
    np.testing.assert_array_equal(run(model, feeds)[0], run_reference(model, feeds)[0])


def test_float4_nonzero_zero_point_refused():
    x = np.float32([1, 2, 3])
    z = np.array(0.5, ml_dtypes.float4_e2m1fn)
    model, feeds = build("QuantizeLinear", [("x", x), ("s", Const(np.float32(1))), ("z", Const(z))],
                         out=[ml_dtypes.float4_e2m1fn], opset=21)
    expect_error(model, feeds, "y_zero_point", "must be zero")
    q = np.array([1, 2, 3], ml_dtypes.float4_e2m1fn)
    model, feeds = build("DequantizeLinear", [("q", q), ("s", Const(np.float32(1))), ("z", Const(z))],
                         out=[np.float32], opset=21)
    expect_error(model, feeds, "x_zero_point", "must be zero")


# ---------------------------------------------------------------------------
# Data movement: one byte per element, so the byte-width kernels serve
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("elem", list(SUB), ids=SUB_IDS)
def test_data_movement(rng, elem):
    x = random_sub(rng, elem, (3, 5, 7))
    checks = [
        ("Transpose", [("x", x)], {"perm": [2, 0, 1]}, x.transpose(2, 0, 1)),
        ("Reshape", [("x", x), ("s", Const(np.int64([5, -1])))], {}, x.reshape(5, -1)),
        ("Gather", [("x", x), ("i", np.int64([2, 0, 2, 1]))], {"axis": 1}, x[:, [2, 0, 2, 1]]),
        ("Concat", [("x", x), ("x2", x[:, :2])], {"axis": 1}, np.concatenate([x, x[:, :2]], axis=1)),
        ("Slice", [("x", x), ("b", Const(np.int64([1]))), ("e", Const(np.int64([6]))), ("a", Const(np.int64([2]))),
                   ("st", Const(np.int64([2])))], {}, x[:, :, 1:6:2]),
        ("Flatten", [("x", x)], {"axis": 2}, x.reshape(15, 7)),
        ("Expand", [("x", x[:, :1]), ("s", Const(np.int64([3, 5, 7])))], {}, np.broadcast_to(x[:, :1], (3, 5, 7))),
        ("Pad", [("x", x), ("p", Const(np.int64([0, 1, 0, 0, 2, 0])))], {},
         np.pad(x.view(np.uint8), [(0, 0), (1, 2), (0, 0)]).view(x.dtype)),
    ]
    for op, inputs, attrs, want in checks:
        model, feeds = build(op, inputs, attrs, out=[SUB[elem]], opset=21)
        got = run(model, feeds)[0]
        same_bits(got, want)


def test_arithmetic_on_subbyte_is_an_error(rng):
    """No kernel computes on 4-bit values: a twinfer error naming the node, not a crash."""
    x = random_sub(rng, TP.INT4, (3, 4))
    model, feeds = build("Add", [("a", x), ("b", x)], out=[ml_dtypes.int4], opset=21)
    expect_error(model, feeds, "int4")
