"""Indexing, sorting, scatter and related ops on the CPU backend (csrc/ops/tensor/:
topk, select (NonZero/Compress/Unique), nms, scatter, eyelike, reverse_sequence,
cumprod, einsum, bitcast; BitShift and Mod in csrc/ops/elementwise) against
onnxruntime, or the ONNX reference evaluator where onnxruntime has no kernel
for the op/opset. Fresh random data with odd sizes; value-dependent output
shapes run both with constant inputs and with runtime inputs (eager path);
bad inputs raise twinfer errors naming the node."""

from __future__ import annotations

import numpy as np
import pytest
import twinfer
from onnx_helpers import assert_close, run_ort, run_reference
from op_cases import BOOL, F16, F32, F64, I32, I64, Const, build, expect_error, rand, run

U64, I8, U8, I16 = np.dtype(np.uint64), np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int16)
ids = lambda dts: [np.dtype(d).name for d in dts]  # noqa: E731


def reference(model, feeds, prefer="ort"):
    """onnxruntime, or the ONNX reference evaluator when onnxruntime cannot run
    the model (no kernel, opset newer than it knows)."""
    if prefer == "ort":
        try:
            return run_ort(model, feeds)
        except Exception:  # noqa: BLE001 - any refusal by onnxruntime
            pass
    return [np.asarray(o) for o in run_reference(model, feeds)]


def check(op, inputs, attrs=None, out=None, opset=17, rtol=0.0, atol=0.0, prefer="ort"):
    model, feeds = build(op, inputs, attrs, out, opset)
    got = run(model, feeds)
    exp = reference(model, feeds, prefer)
    assert len(got) == len(exp)
    for k, (g, e) in enumerate(zip(got, exp)):
        assert_close(g, np.asarray(e), rtol=rtol, atol=atol, what=f"{op} output {k}")
    return got


def k64(v):
    return np.array(v, dtype=np.int64)


# ---------------------------------------------------------------------------
# TopK
# ---------------------------------------------------------------------------
TOPK_DTYPES = [F32, F64, F16, I32, I64, U64, I8]


@pytest.mark.parametrize("dt", TOPK_DTYPES, ids=ids(TOPK_DTYPES))
@pytest.mark.parametrize("largest", [1, 0])
def test_topk(rng, dt, largest):
    for shape, axis, k in [((5, 13), -1, 4), ((7, 3, 5), 1, 3), ((9,), 0, 9), ((4, 6, 3), 0, 1), ((3, 5), 1, 0)]:
        x = rand(rng, shape, dt)
        if np.dtype(dt).kind in "iu":  # many ties: the lower index must come first
            x = rng.integers(0, 4, size=shape).astype(dt)
        attrs = {"axis": axis, "largest": largest}
        ref = "ort" if dt not in (F16, U64, I8) else "reference"
        check("TopK", [("x", x), ("k", Const(k64([k])))], attrs, [dt, I64], opset=11, prefer=ref)


@pytest.mark.parametrize("dt", [F32, F16, I64], ids=ids([F32, F16, I64]))
@pytest.mark.parametrize("largest", [1, 0])
def test_topk_few_of_many(rng, dt, largest):
    # k of n with k <= n / 8 (a sampler's top-k of a vocabulary): the one-pass
    # heap. Last axis and a middle one (strided), k of 1 up to n / 8, many
    # ties among integers (the lower index first), and for floats NaN, inf and
    # -inf planted early and late (NaN ranks as the largest: first when
    # largest, last when not, as onnxruntime has it).
    for shape, axis, k in [((3, 1000), -1, 10), ((2, 999, 3), 1, 124), ((4, 517), 1, 1), ((2, 64), 1, 8)]:
        if np.dtype(dt).kind == "i":
            x = rng.integers(-20, 20, size=shape).astype(dt)
        else:
            x = rng.standard_normal(shape).astype(dt)
            flat = x.reshape(-1)
            flat[[0, 7, flat.size - 3]] = [np.nan, np.inf, -np.inf]
            flat[[5, flat.size // 2]] = [np.nan, np.nan]
        attrs = {"axis": axis, "largest": largest}
        check("TopK", [("x", x), ("k", Const(k64([k])))], attrs, [dt, I64], opset=11,
              prefer="ort" if dt != F16 else "reference")


def test_topk_k_at_runtime_and_old_opsets(rng):
    x = rng.standard_normal((6, 11)).astype(F32)
    # K as a graph input: the output shape depends on its value (eager path).
    check("TopK", [("x", x), ("k", k64([5]))], {"axis": 1}, [F32, I64], opset=11)
    check("TopK", [("x", x), ("k", Const(k64([3])))], {"axis": 0}, [F32, I64], opset=10)
    check("TopK", [("x", x)], {"axis": -1, "k": 7}, [F32, I64], opset=1)


def test_topk_errors(rng):
    x = rng.standard_normal((4, 5)).astype(F32)
    model, feeds = build("TopK", [("x", x), ("k", Const(k64([6])))], {}, [F32, I64], opset=11)
    expect_error(model, feeds, "exceeds")
    model, feeds = build("TopK", [("x", x), ("k", k64([-1]))], {}, [F32, I64], opset=11)
    expect_error(model, feeds, "K")


# ---------------------------------------------------------------------------
# NonZero / Compress / Unique
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("dt", [F32, I64, BOOL, F16], ids=ids([F32, I64, BOOL, F16]))
def test_nonzero(rng, dt):
    for shape in [(7,), (3, 5), (2, 3, 5), (4, 0)]:
        x = rand(rng, shape, dt)
        if dt != BOOL:
            x[rng.random(shape) < 0.4] = 0
        check("NonZero", [("x", x)], out=[I64], opset=13)
        check("NonZero", [("x", Const(x))], out=[I64], opset=13)


def test_compress(rng):
    x = rng.standard_normal((4, 7, 5)).astype(F32)
    for axis, n in [(0, 4), (1, 7), (-1, 5), (1, 3), (None, 140), (None, 11)]:
        cond = rng.random(n) < 0.5
        attrs = {} if axis is None else {"axis": axis}
        check("Compress", [("x", x), ("c", cond)], attrs, opset=11)
        check("Compress", [("x", x), ("c", Const(cond))], attrs, opset=11)


def test_compress_errors(rng):
    x = rng.standard_normal((3, 4)).astype(F32)
    cond = np.array([0, 1, 0, 1, 1], bool)  # true beyond the axis
    model, feeds = build("Compress", [("x", x), ("c", cond)], {"axis": 0}, opset=11)
    expect_error(model, feeds, "beyond")


@pytest.mark.parametrize("sorted_", [1, 0])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_unique(rng, sorted_, axis):
    x = rng.integers(0, 3, size=(6, 5)).astype(F32)
    x[2] = x[4]  # a repeated row
    x[:, 3] = x[:, 1]  # a repeated column
    attrs = {"sorted": sorted_}
    if axis is not None:
        attrs["axis"] = axis
    out = [F32, I64, I64, I64]
    # onnxruntime returns sorted=0 slices in first-occurrence order like the spec.
    check("Unique", [("x", x)], attrs, out, opset=11)
    check("Unique", [("x", Const(x))], attrs, out, opset=11)


@pytest.mark.parametrize("dt", [I64, F64, BOOL, I8], ids=ids([I64, F64, BOOL, I8]))
def test_unique_dtypes(rng, dt):
    x = rand(rng, (17,), dt) if dt != F64 else rng.integers(-3, 3, 17).astype(F64)
    if dt in (I64, I8):
        x = rng.integers(-5, 5, 17).astype(dt)
    check("Unique", [("x", x)], {"sorted": 1}, [dt, I64, I64, I64], opset=11, prefer="reference")


# ---------------------------------------------------------------------------
# NonMaxSuppression
# ---------------------------------------------------------------------------
def nms_inputs(rng, batches, boxes, classes, center):
    xy = rng.uniform(0, 10, (batches, boxes, 2))
    wh = rng.uniform(0.5, 4, (batches, boxes, 2))
    if center:
        b = np.concatenate([xy, wh], -1)
    else:  # [y1, x1, y2, x2], corners in either order
        b = np.concatenate([xy, xy + wh], -1)[..., [1, 0, 3, 2]]
        flip = rng.random((batches, boxes)) < 0.3
        b[flip] = b[flip][:, [2, 3, 0, 1]]
    scores = rng.random((batches, classes, boxes))
    return b.astype(F32), scores.astype(F32)


@pytest.mark.parametrize("center", [0, 1])
def test_nms(rng, center):
    b, s = nms_inputs(rng, 2, 23, 3, center)
    for max_out, iou, thr in [(5, 0.3, 0.2), (100, 0.5, None), (3, 0.0, 0.9), (0, 0.5, 0.1)]:
        ins = [("b", b), ("s", s), ("m", k64([max_out])), ("i", np.array([iou], F32))]
        if thr is not None:
            ins.append(("t", np.array([thr], F32)))
        check("NonMaxSuppression", ins, {"center_point_box": center}, [I64], opset=11)
        # All constants: the shape rule computes the selection.
        ins = [(n, Const(a)) if n != "b" else (n, a) for n, a in ins]
        check("NonMaxSuppression", ins, {"center_point_box": center}, [I64], opset=11)


@pytest.mark.parametrize("center", [0, 1])
def test_nms_over_many_boxes_spread_like_batched_nms(rng, center):
    # torchvision's batched_nms: one NMS over every class's boxes, each class
    # shifted along x past the others; plus a few wide boxes that meet many
    # (the selection tests a candidate only against kept boxes whose x range
    # meets its own: onnxruntime tests every kept box).
    per_class, classes = 180, 7
    b, _ = nms_inputs(rng, 1, per_class * classes, 1, center)
    shift = np.repeat(np.arange(classes) * 20.0, per_class).astype(F32)
    b[0, :, 1 if not center else 0] += shift  # x1 (or x centre)
    if not center:
        b[0, :, 3] += shift
    wide = rng.choice(per_class * classes, 25, replace=False)
    b[0, wide, 3 if not center else 2] += 60  # x2 (or width) far out: overlaps other classes' ranges
    s = rng.random((1, 2, per_class * classes)).astype(F32)
    for max_out, iou in [(10**6, 0.3), (50, 0.6), (10**6, 0.0)]:
        ins = [("b", b), ("s", s), ("m", k64([max_out])), ("i", np.array([iou], F32))]
        check("NonMaxSuppression", ins, {"center_point_box": center}, [I64], opset=11)
        # Large constants: the shape rule leaves K to the kernel's own output.
        ins = [(n, Const(a)) if n != "b" else (n, a) for n, a in ins]
        check("NonMaxSuppression", ins, {"center_point_box": center}, [I64], opset=11)


def test_nms_errors(rng):
    b, s = nms_inputs(rng, 1, 5, 2, 0)
    model, feeds = build("NonMaxSuppression", [("b", b[:, :, :3]), ("s", s)], {}, [I64], opset=11)
    expect_error(model, feeds, "4")
    model, feeds = build("NonMaxSuppression", [("b", b), ("s", s[:, :, :4])], {}, [I64], opset=11)
    expect_error(model, feeds, "box count")


# ---------------------------------------------------------------------------
# Scatter family
# ---------------------------------------------------------------------------
SCATTER_DTYPES = [F32, I64, F16, BOOL]


def unique_indices(rng, n, shape, axis):
    """Per line along `axis`, distinct indices (so reduction "none" has one answer)."""
    idx = np.empty(shape, np.int64)
    it = np.moveaxis(idx, axis, -1)
    for pos in np.ndindex(it.shape[:-1]):
        it[pos] = rng.permutation(n)[: it.shape[-1]]
    return idx


@pytest.mark.parametrize("dt", SCATTER_DTYPES, ids=ids(SCATTER_DTYPES))
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scatter_elements(rng, dt, axis):
    data = rand(rng, (5, 7, 3), dt)
    ishape = [4, 5, 2]
    idx = unique_indices(rng, data.shape[axis], ishape, axis)
    idx[idx > 1] -= data.shape[axis]  # some negative indices
    upd = rand(rng, ishape, dt)
    check("ScatterElements", [("d", data), ("i", idx), ("u", upd)], {"axis": axis}, opset=13)
    check("Scatter", [("d", data), ("i", idx.astype(I32)), ("u", upd)], {"axis": axis}, opset=9)


@pytest.mark.parametrize("red", ["add", "mul", "max", "min"])
@pytest.mark.parametrize("dt", [F32, I32, F64], ids=ids([F32, I32, F64]))
def test_scatter_elements_reduction(rng, red, dt):
    data = rand(rng, (6, 5), dt)
    idx = rng.integers(-6, 6, (9, 5))  # duplicates: the reduction combines them
    upd = rand(rng, (9, 5), dt)
    if red == "mul":
        upd = (upd % 3 + 1).astype(dt) if dt == I32 else rng.uniform(0.5, 1.5, (9, 5)).astype(dt)
    check("ScatterElements", [("d", data), ("i", idx), ("u", upd)], {"axis": 0, "reduction": red}, opset=18,
          rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("red", ["none", "add", "mul", "max", "min"])
def test_scatter_nd(rng, red):
    data = rng.standard_normal((5, 4, 3)).astype(F32)
    for k, n in [(1, 3), (2, 7), (3, 11)]:
        if red == "none":
            flat = rng.permutation(int(np.prod(data.shape[:k])))[:n]
            idx = np.stack(np.unravel_index(flat, data.shape[:k]), -1).astype(np.int64)
        else:
            idx = np.stack([rng.integers(-d, d, n) for d in data.shape[:k]], -1)
        upd = rng.standard_normal((n,) + data.shape[k:]).astype(F32)
        attrs = {} if red == "none" else {"reduction": red}
        check("ScatterND", [("d", data), ("i", idx), ("u", upd)], attrs, opset=18, rtol=1e-6, atol=1e-6)


def test_scatter_errors(rng):
    data = rng.standard_normal((4, 3)).astype(F32)
    model, feeds = build("ScatterElements", [("d", data), ("i", k64([[4, 0, 1]])), ("u", data[:1])], {}, opset=13)
    expect_error(model, feeds, "out of range")
    model, feeds = build("ScatterND", [("d", data), ("i", k64([[1, -4]])), ("u", data[0, :1])], {}, opset=13)
    expect_error(model, feeds, "out of range")
    model, feeds = build("ScatterElements", [("d", data), ("i", k64([[0]])), ("u", data[:1, :1])],
                         {"reduction": "max"}, opset=16)
    expect_error(model, feeds, "reduction")


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter(rng, mode):
    past = rng.standard_normal((3, 2, 9, 5)).astype(F32)
    upd = rng.standard_normal((3, 2, 4, 5)).astype(F32)
    wi = k64([0, 5, 3]) if mode == "linear" else k64([7, 2, 8])
    check("TensorScatter", [("p", past), ("u", upd), ("w", wi)], {"mode": mode, "axis": 2}, opset=24,
          prefer="reference")
    check("TensorScatter", [("p", past), ("u", upd)], {"mode": mode, "axis": -2}, opset=24, prefer="reference")
    if mode == "linear":
        model, feeds = build("TensorScatter", [("p", past), ("u", upd), ("w", k64([0, 6, 0]))], {"axis": 2}, opset=24)
        expect_error(model, feeds, "does not fit")


# ---------------------------------------------------------------------------
# EyeLike / ReverseSequence / CumProd / BitCast
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("k", [0, 2, -3, 9])
def test_eyelike(rng, k):
    x = rng.standard_normal((5, 7)).astype(F32)
    check("EyeLike", [("x", x)], {"k": k}, opset=9)
    check("EyeLike", [("x", x)], {"k": k, "dtype": 7}, [I64], opset=9)
    check("EyeLike", [("x", x.astype(I32))], {"k": k, "dtype": 9}, [BOOL], opset=9, prefer="reference")


@pytest.mark.parametrize("batch_axis", [0, 1])
@pytest.mark.parametrize("dt", [F32, I64, F16], ids=ids([F32, I64, F16]))
def test_reverse_sequence(rng, batch_axis, dt):
    x = rand(rng, (5, 6, 3) if batch_axis == 0 else (6, 5, 3), dt)
    lens = k64(rng.integers(0, 7, 5))
    attrs = {"batch_axis": batch_axis, "time_axis": 1 - batch_axis}
    check("ReverseSequence", [("x", x), ("l", lens)], attrs, opset=10)
    model, feeds = build("ReverseSequence", [("x", x), ("l", k64([1, 2, 3, 4, 9]))], attrs, opset=10)
    expect_error(model, feeds, "sequence length")


@pytest.mark.parametrize("dt", [F32, F64, I32, I64], ids=ids([F32, F64, I32, I64]))
@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumprod(rng, dt, exclusive, reverse):
    x = rng.uniform(0.5, 1.5, (4, 9, 3)).astype(dt) if dt in (F32, F64) else rng.integers(-3, 4, (4, 9, 3)).astype(dt)
    for axis in [0, 1, -1]:
        check("CumProd", [("x", x), ("a", Const(k64(axis)))], {"exclusive": exclusive, "reverse": reverse},
              opset=26, rtol=1e-5, prefer="reference")


@pytest.mark.parametrize("src,dst", [(F32, I32), (I64, F64), (F16, np.dtype(np.int16)), (U8, BOOL), (I8, U8)])
def test_bitcast(rng, src, dst):
    x = rand(rng, (3, 7), src)
    if dst == BOOL:
        x = rng.integers(0, 2, (3, 7)).astype(U8)
    from onnx import helper

    check("BitCast", [("x", x)], {"to": helper.np_dtype_to_tensor_dtype(dst)}, [dst], opset=26, prefer="reference")


# ---------------------------------------------------------------------------
# Einsum
# ---------------------------------------------------------------------------
EINSUM = [("ij,jk->ik", [(3, 5), (5, 7)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("ii->i", [(4, 4)]),
          ("ij->ji", [(3, 5)]), ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 2)]), ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 2)]),
          ("abc,cd->", [(2, 3, 4), (4, 5)]), ("bii->bi", [(3, 4, 4)]), ("i,j->ij", [(3,), (4,)]),
          ("iij,jk->ik", [(3, 3, 2), (2, 5)]), ("ij,ij->i", [(3, 5), (3, 5)]), ("BaA,aA->B", [(2, 3, 4), (3, 4)]),
          ("i,i", [(7,), (7,)])]


@pytest.mark.parametrize("dt", [F32, F64, I64, F16], ids=ids([F32, F64, I64, F16]))
def test_einsum(rng, dt):
    for eq, shapes in EINSUM:
        xs = [rand(rng, s, dt) for s in shapes]
        model, feeds = build("Einsum", [(f"x{i}", x) for i, x in enumerate(xs)], {"equation": eq}, opset=12)
        (got,) = run(model, feeds)
        exp = np.einsum(eq, *[x.astype(np.float64) for x in xs])
        tol = {F16: 2e-2, F32: 1e-5, F64: 1e-12, I64: 0}[dt]
        assert got.dtype == dt and got.shape == exp.shape, eq
        np.testing.assert_allclose(got.astype(np.float64), exp, rtol=tol, atol=tol * 10, err_msg=eq)


def test_einsum_against_ort(rng):
    for eq, shapes in EINSUM[:4]:
        xs = [rng.standard_normal(s).astype(F32) for s in shapes]
        check("Einsum", [(f"x{i}", x) for i, x in enumerate(xs)], {"equation": eq}, opset=12, rtol=1e-5, atol=1e-5)


# Contractions the CPU kernel runs as one oneDNN matmul over strided views of
# its operands and output, and the layouts where a view is impossible and it
# copies (group not one run, batch inside a row, output permuted, summed
# labels, size-1 groups). MaxViT's attention equations come first (spaces and
# all); sizes are odd.
EINSUM_GEMM = [(" BGHID , BGHJD -> BGHIJ", [(1, 5, 2, 7, 9), (1, 5, 2, 11, 9)]),
               ("BGHIJ,BGHJD->BGHID", [(2, 3, 2, 7, 11), (2, 3, 2, 11, 5)]),
               ("bki,bkj->bij", [(3, 7, 5), (3, 7, 9)]), ("bij,bjk->bki", [(3, 5, 7), (3, 7, 9)]),
               ("ibj,bjk->bik", [(5, 3, 7), (3, 7, 9)]), ("bhid,bhjd->bij", [(2, 3, 5, 7), (2, 3, 9, 7)]),
               ("abcd,cdef->abef", [(2, 3, 5, 7), (5, 7, 3, 4)]), ("abcd,cdef->feba", [(2, 3, 5, 7), (5, 7, 3, 4)]),
               ("bij,bj->bi", [(3, 5, 7), (3, 7)]), ("bi,bij->bj", [(3, 5), (3, 5, 7)]), ("bij,bjk", [(1, 5, 7), (1, 7, 3)]),
               ("ij,bjk->bik", [(5, 7), (3, 7, 9)]), ("bij,jk->bik", [(3, 5, 7), (7, 9)]),
               ("bij,bjk,bkl->bil", [(3, 5, 7), (3, 7, 9), (3, 9, 4)]), ("bijx,bjk->bik", [(3, 5, 7, 2), (3, 7, 9)]),
               ("...ij,...jk->...ik", [(3, 1, 5, 7), (4, 7, 9)])]


@pytest.mark.parametrize("dt", [F32, F64, F16], ids=ids([F32, F64, F16]))
def test_einsum_batched_gemm_layouts(rng, dt):
    for eq, shapes in EINSUM_GEMM:
        xs = [rng.standard_normal(s).astype(dt) for s in shapes]
        model, feeds = build("Einsum", [(f"x{i}", x) for i, x in enumerate(xs)], {"equation": eq}, opset=12)
        (got,) = run(model, feeds)
        exp = np.einsum(eq.replace(" ", ""), *[x.astype(np.float64) for x in xs])
        tol = {F16: 2e-2, F32: 1e-5, F64: 1e-12}[dt]
        assert got.dtype == dt and got.shape == exp.shape, eq
        np.testing.assert_allclose(got.astype(np.float64), exp, rtol=tol, atol=tol * 10, err_msg=eq)


def test_einsum_batched_gemm_against_ort(rng):
    for eq, shapes in EINSUM_GEMM[:8]:
        xs = [rng.standard_normal(s).astype(F32) for s in shapes]
        check("Einsum", [(f"x{i}", x) for i, x in enumerate(xs)], {"equation": eq}, opset=12, rtol=1e-5, atol=1e-5)


def test_einsum_errors(rng):
    a, b = rng.standard_normal((3, 4)).astype(F32), rng.standard_normal((5, 6)).astype(F32)
    model, feeds = build("Einsum", [("a", a), ("b", b)], {"equation": "ij,jk->ik"}, opset=12)
    expect_error(model, feeds, "differ")
    model, feeds = build("Einsum", [("a", a)], {"equation": "ijk->i"}, opset=12)
    expect_error(model, feeds, "rank")
    model, feeds = build("Einsum", [("a", a)], {"equation": "ij->iz"}, opset=12)
    expect_error(model, feeds, "no operand")


# ---------------------------------------------------------------------------
# BitShift (signed, opset 28) and Mod (float, fmod=0)
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dt", [I8, I16, I32, I64, U8], ids=ids([I8, I16, I32, I64, U8]))
def test_bitshift_signed(rng, dt, direction):
    bits = dt.itemsize * 8
    info = np.iinfo(dt)
    a = rng.integers(info.min, info.max, (5, 9), dtype=dt)
    b = rng.integers(-3 if info.min < 0 else 0, bits + 3, (5, 9)).astype(dt)
    check("BitShift", [("a", a), ("b", b)], {"direction": direction}, opset=28, prefer="reference")


@pytest.mark.parametrize("dt", [F32, F64, F16], ids=ids([F32, F64, F16]))
def test_mod_float_fmod0(rng, dt):
    a = (rng.standard_normal((4, 7)) * 10).astype(dt)
    b = (rng.standard_normal((7,)) * 3).astype(dt)
    a[0, :3] = [0.0, -0.0, np.inf]
    b[:3] = [2.0, -2.0, 1.0]
    b[5] = np.inf
    b[6] = -np.inf
    tol = 1e-2 if dt == F16 else 1e-6
    check("Mod", [("a", a), ("b", b)], {"fmod": 0}, opset=13, rtol=tol, atol=tol, prefer="reference")


# ---------------------------------------------------------------------------
# CenterCropPad / Det, and old-opset / dtype additions to existing kernels
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("dt", [F32, I64, BOOL], ids=ids([F32, I64, BOOL]))
def test_center_crop_pad(rng, dt):
    x = rand(rng, (7, 6, 3), dt)
    for shape, axes in [([4, 9], [0, 1]), ([10, 3, 3], None), ([5], [-1]), ([7, 1], [0, 1])]:
        attrs = {} if axes is None else {"axes": axes}
        check("CenterCropPad", [("x", x), ("s", Const(k64(shape)))], attrs, opset=18, prefer="reference")
        check("CenterCropPad", [("x", x), ("s", k64(shape))], attrs, opset=18, prefer="reference")


def test_det(rng):
    for shape in [(5, 5), (3, 4, 4), (2, 1, 1), (6, 3, 3)]:
        x = rng.standard_normal(shape).astype(F32)
        check("Det", [("x", x)], opset=11, rtol=1e-4, atol=1e-5)
    x = rng.standard_normal((4, 4))
    x[2] = x[1]  # singular
    check("Det", [("x", x)], opset=11, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_before_opset_11(rng, mode):
    x = rng.standard_normal((3, 5, 4)).astype(F32)
    attrs = {"mode": mode, "pads": [0, 2, 1, 1, 0, 3]}
    if mode == "constant":
        attrs["value"] = 1.5
    check("Pad", [("x", x)], attrs, opset=2, prefer="reference")


def test_slice_before_opset_10(rng):
    x = rng.standard_normal((6, 7, 4)).astype(F32)
    check("Slice", [("x", x)], {"starts": [1, -5], "ends": [100, -1], "axes": [0, 1]}, opset=1)
    check("Slice", [("x", x)], {"starts": [0, 2, 1], "ends": [3, 6, 3]}, opset=9)


def test_reduce_minmax_bool(rng):
    x = rng.random((4, 7)) < 0.5
    for op in ["ReduceMax", "ReduceMin"]:
        for axes in [[0], [1], [0, 1]]:
            check(op, [("x", x), ("a", Const(k64(axes)))], {"keepdims": 0}, opset=20, prefer="reference")


@pytest.mark.parametrize("dt", [F16, np.dtype(np.float32)], ids=["float16", "float32"])
def test_range_half(dt):
    args = [("s", np.array(1.5, dt)), ("l", np.array(9.25, dt)), ("d", np.array(0.75, dt))]
    check("Range", args, opset=11, prefer="reference")
    check("Range", [(n, Const(a)) for n, a in args], opset=11, prefer="reference")
