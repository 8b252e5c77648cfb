"""Reductions on the CPU backend (csrc/ops/reduce/) against onnxruntime: the ten
Reduce* ops with axes as an attribute (before opset 18; 13 for ReduceSum) and as
an input, keepdims, empty axes and noop_with_empty_axes, and ArgMax / ArgMin
with select_last_index. Fresh random data, odd sizes; the axis sets cover all
three walks of the kernel (trailing rows, [kept, reduced, kept] columns, and
the general interleaved case)."""

from __future__ import annotations

import numpy as np
import pytest
import twinfer
from op_cases import F32, F64, I32, I64, Const, build, check, expect_error, out_shapes, run, sym_model

OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
       "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]
# Axes over a (3, 5, 7, 4) input: None = all; [0] leading (columns), [-1] trailing
# (rows), [1] and [1, 2] middle (columns), [0, 2] and [1, 3] interleaved (general).
AXES = [None, [0], [-1], [1], [1, 2], [0, 2], [-3, 3], [2]]
SHAPE = (3, 5, 7, 4)
TOL = {F32: (2e-5, 1e-5), F64: (1e-12, 1e-12)}


def data(rng, op, shape, dt):
    """Inputs each op is well defined on: positive for ReduceLogSum, near 1 for
    ReduceProd (no overflow), small ints where products or squares grow."""
    dt = np.dtype(dt)
    if dt.kind == "f":
        if op == "ReduceLogSum":
            return rng.uniform(0.1, 2.0, shape).astype(dt)
        if op == "ReduceProd":
            return rng.uniform(0.7, 1.3, shape).astype(dt)
        return (rng.standard_normal(shape) * 3).astype(dt)
    if op == "ReduceProd":
        return rng.choice(np.array([-1, 1, 1, 2], dtype=dt), size=shape)
    return rng.integers(-20, 20, size=shape).astype(dt)


def reduce_case(op, x, axes, keepdims, opset, noop=None):
    attrs = {"keepdims": keepdims}
    if noop is not None:
        attrs["noop_with_empty_axes"] = noop
    inputs = [("x", x)]
    axes_input = opset >= (13 if op == "ReduceSum" else 18)
    if axes is not None:
        if axes_input:
            inputs.append(("axes", Const(np.array(axes, I64))))
        else:
            attrs["axes"] = axes
    return inputs, attrs


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("axes", AXES, ids=str)
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("opset", [13, 18])
def test_reduce_float32(rng, op, axes, keepdims, opset):
    x = data(rng, op, SHAPE, F32)
    inputs, attrs = reduce_case(op, x, axes, keepdims, opset)
    rtol, atol = TOL[F32]
    check(op, inputs, attrs, opset=opset, rtol=rtol, atol=atol)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("axes", [None, [1], [0, 2]], ids=str)
def test_reduce_float64(rng, op, axes):
    x = data(rng, op, SHAPE, F64)
    inputs, attrs = reduce_case(op, x, axes, 1, 18)
    check(op, inputs, attrs, opset=18, rtol=1e-12, atol=1e-12)


# onnxruntime's integer kernels: Sum/Max/Min/Prod/Mean/L1/SumSquare on int32/int64.
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceMean", "ReduceL1",
                                "ReduceSumSquare"])
@pytest.mark.parametrize("axes", [None, [-1], [1], [0, 2]], ids=str)
@pytest.mark.parametrize("dt", [I32, I64], ids=["int32", "int64"])
def test_reduce_int(rng, op, axes, dt):
    x = data(rng, op, (3, 5, 4), dt)
    if op == "ReduceMean":
        x = np.abs(x)  # integer mean: truncation of a negative mean differs between runtimes
    inputs, attrs = reduce_case(op, x, axes, 0, 18)
    check(op, inputs, attrs, opset=18)


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("dt", [np.int8, np.uint8], ids=["int8", "uint8"])
def test_reduce_minmax_8bit(rng, op, dt):
    x = rng.integers(0 if dt == np.uint8 else -128, 128, size=(5, 7, 3)).astype(dt)
    check(op, [("x", x), ("axes", Const(np.array([1], I64)))], {"keepdims": 1}, opset=18)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceL2"])
def test_reduce_empty_axes(rng, op):
    x = data(rng, op, (3, 5, 7), F32)
    opset = 18
    # Empty axes reduce everything; with noop_with_empty_axes each element is
    # a set of one (an Identity but for L2's |x|).
    check(op, [("x", x)], {"keepdims": 0}, opset=opset, rtol=2e-5, atol=1e-5)
    check(op, [("x", x), ("axes", Const(np.array([], I64)))], {"keepdims": 1}, opset=opset, rtol=2e-5, atol=1e-5)
    (got,) = run(*build(op, [("x", x), ("axes", Const(np.array([], I64)))], {"noop_with_empty_axes": 1},
                        opset=opset))
    np.testing.assert_array_equal(got, np.abs(x) if op == "ReduceL2" else x)


@pytest.mark.parametrize("op", ["ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceProd"])
def test_reduce_over_no_axis_still_maps_each_element(rng, op):
    # noop_with_empty_axes: a set of one per element, which the op maps
    # (onnxruntime and the reference agree): SumSquare gave x, not x*x.
    from onnx_helpers import run_reference

    x = rng.standard_normal((3, 4)).astype(F32)
    model, feeds = build(op, [("x", x), ("axes", Const(np.array([], I64)))], {"noop_with_empty_axes": 1}, opset=18)
    (got,) = run(model, feeds)
    np.testing.assert_allclose(got, run_reference(model, feeds)[0], rtol=1e-6, atol=1e-7, equal_nan=True)


def test_reduce_logsumexp_large_values(rng):
    # exp would overflow without the max subtracted first.
    x = (rng.standard_normal((5, 7, 3)) * 50 + 1000).astype(F32)
    for axes in ([1], [2], [0, 2]):
        check("ReduceLogSumExp", [("x", x)], {"axes": axes}, opset=13, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("threads", [1, 2])
def test_reduce_large_threaded(rng, threads):
    x = rng.standard_normal((67, 1031)).astype(F32)
    check("ReduceSum", [("x", x), ("a", Const(np.array([1], I64)))], {}, rtol=1e-4, atol=1e-4,
          num_threads=threads)
    x = rng.standard_normal((3, 517, 129)).astype(F32)
    check("ReduceMean", [("x", x)], {"axes": [1]}, rtol=1e-4, atol=1e-5, num_threads=threads)
    check("ReduceMax", [("x", x)], {"axes": [0, 2]}, num_threads=threads)
    x = rng.standard_normal((600, 1, 301)).astype(F32)
    check("ReduceL2", [("x", x)], {"axes": [0, 1], "keepdims": 0}, rtol=1e-4, atol=1e-5, num_threads=threads)


def test_reduce_symbolic_and_errors(rng):
    x = np.zeros((2, 5, 7), F32)
    m = sym_model("ReduceSum", [("x", x), ("a", Const(np.array([1], I64)))], {"keepdims": 0}, opset=13,
                  x=["N", 5, "W"])
    assert out_shapes(m) == [("N", "W")]
    m = sym_model("ReduceMean", [("x", x)], {"axes": [-1]}, opset=13, x=["N", 5, "W"])
    assert out_shapes(m) == [("N", 5, 1)]
    model, feeds = build("ReduceMax", [("x", rng.standard_normal((3, 5)).astype(F32))], {"axes": [2]}, opset=13)
    expect_error(model, feeds, "out of range", kind=twinfer.ShapeError)
    model, feeds = build("ReduceSum", [("x", rng.standard_normal((3, 5)).astype(F32)),
                                       ("a", Const(np.array([0, -2], I64)))], opset=13)
    expect_error(model, feeds, "repeated", kind=twinfer.ShapeError)
    model, feeds = build("ReduceL2", [("x", np.array([True, False]))], {"axes": [0]}, opset=13)
    expect_error(model, feeds, "bool", kind=twinfer.DTypeError)


# ---------------------------------------------------------------------------
# ArgMax / ArgMin
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("last", [0, 1])
@pytest.mark.parametrize("dt", [F32, I64, I32, F64], ids=["float32", "int64", "int32", "float64"])
def test_argminmax(rng, op, axis, keepdims, last, dt):
    # Few distinct values, so ties (where select_last_index matters) are common.
    x = rng.integers(-3, 4, size=(3, 5, 7)).astype(dt)
    if dt in (F32, F64):
        x = x * np.asarray(1.5, dt)
    check(op, [("x", x)], {"axis": axis, "keepdims": keepdims, "select_last_index": last}, out=[I64], opset=13)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_argminmax_large_and_errors(rng, op):
    x = rng.standard_normal((37, 301, 43)).astype(F32)
    for axis in (0, 1, 2):
        check(op, [("x", x)], {"axis": axis}, out=[I64], num_threads=2)
    m = sym_model(op, [("x", np.zeros((2, 5), F32))], {"axis": 1, "keepdims": 0}, out=[I64], x=["N", 5])
    assert out_shapes(m) == [("N",)]
    model, feeds = build(op, [("x", x)], {"axis": 3}, out=[I64])
    expect_error(model, feeds, "axis", kind=twinfer.ShapeError)
    model, feeds = build(op, [("x", np.zeros((3, 0), F32))], {"axis": 1}, out=[I64])
    expect_error(model, feeds, "empty", kind=twinfer.ShapeError)


@pytest.mark.parametrize("axes", [[1], [0], [0, 2]], ids=str)
def test_reduce_minmax_nan(rng, axes):
    # A NaN makes the max / min NaN, as in NumPy (checked against NumPy).
    x = rng.standard_normal((5, 7, 3)).astype(F32)
    x[1, 2, 0] = np.nan
    x[3, 0, 2] = np.nan
    for op, ref in (("ReduceMax", np.max), ("ReduceMin", np.min)):
        (got,) = run(*build(op, [("x", x)], {"axes": axes, "keepdims": 0}, opset=13))
        np.testing.assert_array_equal(got, ref(x, axis=tuple(axes)))


@pytest.mark.parametrize("n", [37, 8, 5])
def test_reduce_minmax_last_axis_nan_and_infinities(rng, n):
    # The float32 rows path (eight lanes, reduce_f32.cc): NaN in the lanes'
    # part and in the tail, infinities without NaN, against NumPy (LogSumExp:
    # its exp in float, within an ulp of libm's).
    x = rng.standard_normal((6, n)).astype(F32)
    x[0, 1] = np.nan
    x[1, n - 1] = np.nan
    x[2, n // 2] = np.inf
    x[3, 0] = -np.inf
    x[4, :] = np.inf
    def logsumexp(v, axis):
        m = np.max(v, axis=axis, keepdims=True)
        m = np.where(np.isfinite(m), m, 0)
        return (np.log(np.sum(np.exp(v - m), axis=axis, keepdims=True)) + m).squeeze(axis)

    for op, ref in (("ReduceMax", np.max), ("ReduceMin", np.min), ("ReduceSum", np.sum), ("ReduceMean", np.mean),
                    ("ReduceLogSumExp", logsumexp)):
        (got,) = run(*build(op, [("x", x)], {"axes": [1], "keepdims": 0}, opset=12))  # axes an attribute
        with np.errstate(invalid="ignore", over="ignore"):
            want = ref(x.astype(np.float64), axis=1)
        np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True, err_msg=op)


def test_reduce_sum_over_a_middle_axis_of_float_runs(rng):
    # Columns summed 8 rows at a time in float, then in double (reduce_f32.cc):
    # 2000 rows of values whose float running sum would drift, against float64.
    x = (rng.standard_normal((3, 2001, 37)) + 1000).astype(F32)
    (got,) = run(*build("ReduceSum", [("x", x)], {"axes": [1], "keepdims": 0}, opset=12))
    np.testing.assert_allclose(got, x.astype(np.float64).sum(axis=1), rtol=2e-7)


def test_argmax_nan(rng):
    x = rng.standard_normal((4, 19)).astype(F32)
    x[1, 5] = np.nan
    x[1, 11] = np.nan
    x[3, 17] = np.nan
    for op, ref in (("ArgMax", np.argmax), ("ArgMin", np.argmin)):
        for axis in (0, 1):
            (got,) = run(*build(op, [("x", x)], {"axis": axis, "keepdims": 0}, out=[I64]))
            np.testing.assert_array_equal(got, ref(x, axis=axis))


@pytest.mark.parametrize("op,ref", [("ReduceSum", np.sum), ("ReduceMean", np.mean), ("ReduceMax", np.max),
                                    ("ReduceL2", lambda a, axis: np.sqrt(np.sum(a * a, axis=axis)))])
@pytest.mark.parametrize("axes", [[1], [0, 2]], ids=str)
def test_reduce_float16(rng, op, ref, axes):
    # float16 accumulates in double and rounds once: NumPy in float64 on the
    # same values, rounded to float16, is the reference.
    x = rng.standard_normal((5, 7, 3)).astype(np.float16)
    (got,) = run(*build(op, [("x", x), ("a", Const(np.array(axes, I64)))], {"keepdims": 0}, opset=18))
    want = ref(x.astype(F64), axis=tuple(axes)).astype(np.float16)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(F32), want.astype(F32), rtol=1e-3, atol=1e-3)
