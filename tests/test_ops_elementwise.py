"""Elementwise ops on the CPU backend (csrc/ops/elementwise/) against onnxruntime,
or the ONNX reference evaluator where onnxruntime has no kernel for a dtype.

Every case is a one-node model on fresh random data with odd shapes. 16-bit
floats are checked against the op computed in float32 on the same (rounded)
inputs, rounded back: that is what the kernels promise (convert to float32,
compute, convert back), so the tolerance is one or two units in the last place.
bfloat16 inputs enter the model through a Cast from float32 (and leave through
one), so the test does not depend on how bfloat16 arrays cross the Python API.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx_helpers import assert_close, make_model, run_ort, run_reference, run_twinfer

# The reference computations on edge values (NaN/inf inputs, overflowing
# casts) warn by design.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
BF16 = np.dtype(ml_dtypes.bfloat16)
HALF = (F16, BF16)
FLOATS = [F32, F64, F16, BF16]
SINTS = [np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64)]
UINTS = [np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64)]
INTS = SINTS + UINTS
BOOL = np.dtype(bool)
ALL = FLOATS + INTS + [BOOL]

# Tolerances per result dtype. float16/bfloat16: the float32 result rounded
# to 16 bits may land one unit in the last place apart (2^-10 / 2^-7).
TOL = {F32: (1e-5, 1e-6), F64: (1e-10, 1e-12), F16: (2e-3, 1e-3), BF16: (1.6e-2, 1e-2)}

# onnxruntime has no kernel for the dtype (NotImplemented), or the dtype is
# outside the op's ONNX type list at this opset (InvalidGraph: e.g. Celu on
# float64, IsInf on float16), which twinfer accepts as a natural extension.
ORT_LACKS_KERNEL = (
    ort.capi.onnxruntime_pybind11_state.NotImplemented,
    ort.capi.onnxruntime_pybind11_state.InvalidGraph,
)


def ids(dts):
    return [d.name for d in dts]


def reference(model, feeds):
    """onnxruntime; the ONNX reference evaluator where ORT has no kernel for these dtypes."""
    try:
        return run_ort(model, feeds)
    except ORT_LACKS_KERNEL:
        pass
    # The reference evaluator's ops return NumPy scalars (and then fail) for
    # 0-d inputs: give it (1,) instead and restore the broadcast shape after.
    # Every op in this file is elementwise, so that changes nothing else.
    shape = np.broadcast_shapes(*(v.shape for v in feeds.values()))
    outs = run_reference(model, {k: v.reshape(1) if v.ndim == 0 else v for k, v in feeds.items()})
    return [np.asarray(o).reshape(shape) if np.asarray(o).size == int(np.prod(shape)) else o for o in outs]


def build(op, inputs, attrs, out_dtypes, opset):
    """One `op` node. inputs: [(name, array or None for an omitted optional input)];
    bfloat16 inputs/outputs cross the graph boundary as float32 through a Cast."""
    nodes, after, graph_in, feeds, names = [], [], [], {}, []
    for name, a in inputs:
        if a is None:
            names.append("")
            continue
        a = np.asarray(a)  # 0-d comparisons give NumPy scalars
        if a.dtype == BF16:
            graph_in.append((name, F32, list(a.shape)))
            feeds[name] = a.astype(F32)
            nodes.append(helper.make_node("Cast", [name], [name + "_bf16"], to=TensorProto.BFLOAT16))
            names.append(name + "_bf16")
        else:
            graph_in.append((name, a.dtype, list(a.shape)))
            feeds[name] = a
            names.append(name)
    while names and names[-1] == "":
        names.pop()
    outs, graph_out = [], []
    for k, dt in enumerate(out_dtypes):
        if dt is None:
            outs.append("")
        elif np.dtype(dt) == BF16:
            outs.append(f"y{k}_bf16")
            after.append(helper.make_node("Cast", [f"y{k}_bf16"], [f"y{k}"], to=TensorProto.FLOAT))
            graph_out.append((f"y{k}", F32, None))
        else:
            outs.append(f"y{k}")
            graph_out.append((f"y{k}", np.dtype(dt), None))
    nodes.append(helper.make_node(op, names, outs, name=f"the_{op.lower()}", **attrs))
    return make_model(nodes + after, graph_in, graph_out, opset=opset), feeds


def twinfer_run(model, feeds, **opts):
    # optimize=False: these are kernel tests, no pass may rewrite the node away.
    return run_twinfer(model, feeds, optimize=False, **opts)


def check(op, inputs, attrs=None, out=None, opset=17, tol_scale=1.0, **opts):
    """Run one node in twinfer and in the reference; compare every output.
    out: output dtypes (default: one output of the first input's dtype)."""
    attrs = attrs or {}
    inputs = [(n, None if a is None else np.asarray(a)) for n, a in inputs]
    first = next(a for _, a in inputs if a is not None)
    out = [np.dtype(d) if d is not None else None for d in (out or [first.dtype])]
    model, feeds = build(op, inputs, attrs, out, opset)
    got = twinfer_run(model, feeds, **opts)
    present = [d for d in out if d is not None]
    if any(a is not None and a.dtype in HALF for _, a in inputs):
        # The op in float32 on the same 16-bit values, rounded back.
        up = [(n, a.astype(F32) if a is not None and a.dtype in HALF else a) for n, a in inputs]
        rmodel, rfeeds = build(op, up, attrs, [F32 if d in HALF else d for d in out], opset)
        exp = reference(rmodel, rfeeds)
        exp = [e.astype(d).astype(F32 if d == BF16 else d) if d in HALF else e for e, d in zip(exp, present)]
    else:
        exp = reference(model, feeds)
    assert len(got) == len(exp)
    for g, e, d in zip(got, exp, present):
        rtol, atol = TOL.get(d, (0, 0))
        assert_close(g, e, rtol=rtol * tol_scale, atol=atol * tol_scale, what=f"{op} {d}")
    return got


def with_edges(x, edges):
    """x (float64) with its first elements replaced by edge values."""
    flat = x.reshape(-1).copy()
    n = min(len(edges), flat.size)
    flat[:n] = edges[:n]
    return flat.reshape(x.shape)


def as_dtype(x, dt):
    with np.errstate(invalid="ignore", over="ignore"):
        return np.asarray(x).astype(dt)


def rand_ints(rng, shape, dt, lo=None, hi=None):
    info = np.iinfo(dt)
    lo = info.min if lo is None else max(lo, info.min)
    hi = info.max if hi is None else min(hi, info.max)
    return rng.integers(lo, hi, size=shape, endpoint=True, dtype=dt)


# ---------------------------------------------------------------------------
# Unary float ops: (op, data generator, edge values, attrs, opset, tol_scale).
# float32: rtol 1e-5 holds for every op, transcendental ones included.
# ---------------------------------------------------------------------------
def normal(scale):
    return lambda rng, s: rng.standard_normal(s) * scale


def uniform(lo, hi):
    return lambda rng, s: rng.uniform(lo, hi, s)


INF, NAN = np.inf, np.nan
UNARY_FLOAT = [
    ("Abs", normal(3), [-0.0, INF, -INF, NAN], {}, 17, 1),
    ("Neg", normal(3), [-0.0, INF, NAN], {}, 17, 1),
    ("Sign", normal(3), [0.0, -0.0, INF, -INF, NAN], {}, 17, 1),
    ("Reciprocal", normal(3), [0.0, -0.0, INF], {}, 17, 1),
    ("Exp", normal(4), [100.0, -100.0, 1000.0, -1000.0, INF, -INF, NAN, 0.0], {}, 17, 1),
    ("Log", uniform(0.01, 50), [0.0, -1.0, INF, NAN, 1e-30], {}, 17, 1),
    ("Sqrt", uniform(0, 50), [-1.0, 0.0, -0.0, INF, -INF], {}, 17, 1),
    ("Sin", normal(4), [0.0, 100.0, INF], {}, 17, 1),
    ("Cos", normal(4), [0.0, 100.0, INF], {}, 17, 1),
    ("Tan", uniform(-1.4, 1.4), [0.0, 1.5], {}, 17, 1),
    ("Asin", uniform(-0.999, 0.999), [1.0, -1.0, 1.5, -2.0], {}, 17, 1),
    ("Acos", uniform(-0.999, 0.999), [1.0, -1.0, 1.5, -2.0], {}, 17, 1),
    ("Atan", normal(5), [INF, -INF, 0.0], {}, 17, 1),
    ("Sinh", normal(3), [100.0, -100.0, 0.0], {}, 17, 1),
    ("Cosh", normal(3), [100.0, -100.0, 0.0], {}, 17, 1),
    ("Asinh", normal(5), [0.0, INF, -INF], {}, 17, 1),
    ("Acosh", uniform(1, 20), [1.0, 0.5, INF], {}, 17, 1),
    ("Atanh", uniform(-0.99, 0.99), [1.0, -1.0, 2.0, 0.0], {}, 17, 1),
    # onnxruntime computes float32 tanh/sigmoid/erf with its own vectorised
    # approximations (MLAS); they still agree with libm's to 1e-5 relative
    # (checked over many seeds), so no looser tolerance is needed.
    ("Tanh", normal(3), [20.0, -20.0, INF, -INF, 0.0], {}, 17, 1),
    ("Sigmoid", normal(4), [100.0, -100.0, INF, -INF, 0.0], {}, 17, 1),
    ("Erf", normal(2), [5.0, -5.0, INF, 0.0], {}, 17, 1),
    ("Floor", normal(5), [-0.5, 0.5, -2.5, INF, NAN, -0.0], {}, 17, 1),
    ("Ceil", normal(5), [-0.5, 0.5, -2.5, INF, NAN, -0.0], {}, 17, 1),
    # Round: half to even.
    ("Round", normal(5), [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, -3.5, 0.49999997], {}, 17, 1),
    ("Softplus", normal(5), [100.0, -100.0, 30.0, -30.0, 0.0], {}, 17, 1),
    ("Softsign", normal(5), [INF, -INF, 0.0], {}, 17, 1),
    ("Relu", normal(3), [-0.0, INF, -INF], {}, 17, 1),
    ("LeakyRelu", normal(3), [-INF], {}, 17, 1),
    ("LeakyRelu", normal(3), [], {"alpha": 0.3}, 17, 1),
    ("Elu", normal(3), [-100.0, -1e-6], {}, 17, 1),
    ("Elu", normal(3), [], {"alpha": 0.5}, 17, 1),
    ("Selu", normal(3), [-100.0], {}, 17, 1),
    ("Selu", normal(3), [], {"alpha": 1.5, "gamma": 2.0}, 17, 1),
    ("Celu", normal(3), [-100.0], {}, 17, 1),
    ("Celu", normal(3), [], {"alpha": 2.0}, 17, 1),
    ("ThresholdedRelu", normal(3), [1.0], {}, 17, 1),
    ("ThresholdedRelu", normal(3), [], {"alpha": 0.3}, 17, 1),
    ("HardSigmoid", normal(5), [], {}, 17, 1),
    ("HardSigmoid", normal(5), [], {"alpha": 0.3, "beta": 0.4}, 17, 1),
    ("HardSwish", normal(5), [-3.0, 3.0], {}, 17, 1),
    ("Mish", normal(4), [50.0, -50.0, 0.0], {}, 18, 1),
    ("Gelu", normal(3), [10.0, -10.0, 0.0], {}, 20, 1),  # opset 20
    ("Gelu", normal(3), [10.0, -10.0, 0.0], {"approximate": "tanh"}, 20, 1),
    ("Shrink", normal(2), [0.5, -0.5], {}, 17, 1),
    ("Shrink", normal(2), [], {"lambd": 1.0, "bias": 0.3}, 17, 1),
]


def _erf(x):
    return np.vectorize(math.erf, otypes=[F64])(x)


# onnxruntime has no float64 kernel for these and the reference evaluator
# computes them in float32: NumPy/math in float64 is the reference instead.
NUMPY_F64 = {
    "Erf": lambda x, a: _erf(x),
    "Gelu": lambda x, a: (
        0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
        if a.get("approximate") == "tanh"
        else 0.5 * x * (1 + _erf(x / np.sqrt(2)))
    ),
    "Shrink": lambda x, a: _shrink(x, float(np.float32(a.get("lambd", 0.5))), float(np.float32(a.get("bias", 0.0)))),
}


def _shrink(x, lambd, bias):  # attributes are float32 in ONNX: rounded as above
    return np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0.0))


@pytest.mark.parametrize("dt", FLOATS, ids=ids(FLOATS))
@pytest.mark.parametrize(
    "op,gen,edges,attrs,opset,tol", UNARY_FLOAT, ids=[f"{c[0]}-{i}" for i, c in enumerate(UNARY_FLOAT)]
)
def test_unary_float(rng, op, gen, edges, attrs, opset, tol, dt):
    for shape in [(3, 5, 7), ()]:
        x = as_dtype(with_edges(gen(rng, shape), edges), dt)
        if dt == F64 and op in NUMPY_F64:
            model, feeds = build(op, [("x", x)], attrs, [dt], opset)
            assert_close(twinfer_run(model, feeds)[0], NUMPY_F64[op](x, attrs), *TOL[F64])
        else:
            check(op, [("x", x)], attrs, opset=opset, tol_scale=tol)


# Ops that take integers too; values across each type's whole range,
# including its minimum and maximum.
UNARY_INT = [
    ("Abs", INTS, 17),
    ("Neg", SINTS, 17),
    ("Sign", INTS, 17),
    ("Relu", SINTS, 17),
    ("BitwiseNot", INTS, 18),
    ("Shrink", INTS, 17),
]


def test_erf_float32_is_within_4_ulp_of_libm(rng):
    """The vectorised float32 Erf (series below 1, A&S 7.1.26 above) on a
    dense grid, both branch boundaries, fresh random values and the edges,
    against Python's double erf rounded to float32."""
    x = np.concatenate([np.linspace(-6, 6, 120001), rng.standard_normal(50001) * 2,
                        np.nextafter(np.float32([1, 1, 4, 4]), np.float32([0, 2, 0, 8])),
                        [0.0, -0.0, 1e-30, -1e-8, 1.0, 4.0, np.inf, -np.inf, np.nan]]).astype(np.float32)
    model = make_model([helper.make_node("Erf", ["x"], ["y"])], [("x", np.float32, [len(x)])],
                       [("y", np.float32, [len(x)])])
    got = run_twinfer(model, {"x": x})[0]
    want = np.array([math.erf(float(v)) for v in x], dtype=np.float64)
    finite = ~np.isnan(x)
    ulps = np.abs(got[finite] - want[finite]) / np.spacing(np.abs(want[finite]).astype(np.float32))
    assert ulps.max() <= 4, (ulps.max(), x[finite][np.argmax(ulps)])
    assert np.isnan(got[~finite]).all()
    assert np.signbit(got[x == 0]).tolist() == np.signbit(x[x == 0]).tolist()  # erf(-0) = -0


def _logistic_grid(rng):
    """A dense grid, fresh random values, exp's range-reduction boundaries
    (|r| = ln2/2), the float32 underflow and subnormal tails, and the edges."""
    return np.concatenate([np.linspace(-12, 12, 240001), rng.standard_normal(50001) * 3,
                           np.linspace(-110, 110, 2001),
                           [0.3466, -0.3466, 0.1733, -0.1733, 87.3, -87.3, 88.7, -88.7, 103.9, -103.9,
                            1e-30, -1e-30, 1e-40, -1e-40, 0.0, -0.0, np.inf, -np.inf, np.nan]]).astype(np.float32)


@pytest.mark.parametrize("op", ["Sigmoid", "Tanh"])
def test_sigmoid_and_tanh_float32_are_within_4_ulp(rng, op):
    """The vectorised float32 Sigmoid and Tanh (ops/elementwise/logistic_fast.cc)
    against float64 NumPy rounded to float32, subnormal results included."""
    x = _logistic_grid(rng)
    model = make_model([helper.make_node(op, ["x"], ["y"])], [("x", np.float32, [len(x)])],
                       [("y", np.float32, [len(x)])])
    got = run_twinfer(model, {"x": x})[0]
    xd = x.astype(np.float64)
    with np.errstate(over="ignore"):
        want = 1 / (1 + np.exp(-xd)) if op == "Sigmoid" else np.tanh(xd)
    finite = ~np.isnan(x)
    spacing = np.spacing(np.maximum(np.abs(want[finite]), np.finfo(np.float32).tiny).astype(np.float32))
    ulps = np.abs(got[finite] - want[finite]) / spacing
    assert ulps.max() <= 4, (ulps.max(), x[finite][np.argmax(ulps)])
    assert np.isnan(got[~finite]).all()
    if op == "Tanh":
        assert np.signbit(got[x == 0]).tolist() == np.signbit(x[x == 0]).tolist()  # tanh(-0) = -0


def test_exp_float32_is_within_4_ulp_over_its_whole_range(rng):
    """The vectorised float32 Exp (ops/elementwise/transcendental_fast.cc) against
    float64 NumPy rounded to float32: subnormal results, the overflow edge
    (88.72: the largest finite result, then inf), the infinities and NaN."""
    x = np.concatenate([_logistic_grid(rng), np.linspace(85, 89, 4001),
                        np.float32([88.72283, 88.72284, 88.7229, -103.97, -103.98, -104.5, 1e4, -1e4])])
    x = x.astype(np.float32)
    model = make_model([helper.make_node("Exp", ["x"], ["y"])], [("x", np.float32, [len(x)])],
                       [("y", np.float32, [len(x)])])
    got = run_twinfer(model, {"x": x})[0]
    with np.errstate(over="ignore"):
        want = np.exp(x.astype(np.float64))
    want32 = want.astype(np.float32)
    finite = np.isfinite(want32) & (want32 >= np.finfo(np.float32).tiny)
    ulps = np.abs(got[finite] - want[finite]) / np.spacing(want32[finite])
    assert ulps.max() <= 4, (ulps.max(), x[finite][np.argmax(ulps)])
    tiny = np.isfinite(x) & (want32 < np.finfo(np.float32).tiny)
    assert np.abs(got[tiny] - want[tiny]).max() <= 2 ** -149  # subnormal: within one step
    assert (got[np.isinf(want32) & ~np.isnan(x)] == np.inf).all()
    assert got[x == -np.inf][0] == 0 and np.isnan(got[np.isnan(x)]).all()


def test_mish_float32_against_float64(rng):
    """The vectorised float32 Mish, x * n / (n + 2) with n = e^x (e^x + 2),
    against float64 x * tanh(softplus(x)): within 4 ulp where the result is a
    normal float; subnormal tails within 2^-149 of it; the infinities and NaN
    as the definition gives them (-inf * 0 is NaN)."""
    # -8..-2 densely: where float arithmetic after exp once reached 4.3 ulp.
    x = np.concatenate([_logistic_grid(rng), np.linspace(15, 25, 1001), np.linspace(-8, -2, 600001)]).astype(np.float32)
    model = make_model([helper.make_node("Mish", ["x"], ["y"])], [("x", np.float32, [len(x)])],
                       [("y", np.float32, [len(x)])], opset=18)
    got = run_twinfer(model, {"x": x})[0]
    xd = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        want = xd * np.tanh(np.logaddexp(0.0, xd))
    want32 = np.abs(want).astype(np.float32)
    normal = np.isfinite(want) & (want32 >= np.finfo(np.float32).tiny)
    ulps = np.abs(got[normal] - want[normal]) / np.spacing(want32[normal])
    assert ulps.max() <= 4, (ulps.max(), x[normal][np.argmax(ulps)])
    tiny = np.isfinite(want) & ~normal
    assert np.abs(got[tiny] - want[tiny]).max() <= 2 ** -149
    assert got[x == np.inf][0] == np.inf and np.isnan(got[x == -np.inf][0]) and np.isnan(got[np.isnan(x)][0])


def test_log_float32_is_within_4_ulp(rng):
    """The vectorised float32 Log (ops/elementwise/fast_log.h) against float64
    over normal and subnormal inputs, around 1 (where log is near 0) and the
    mantissa split at sqrt(2); 0 gives -inf, negatives and NaN NaN."""
    x = np.concatenate([np.exp(np.linspace(-103, 88, 200001)), rng.random(50001) * 4,
                        1 + np.linspace(-0.01, 0.01, 20001), np.float32([1.4142135, 1.4142137, 0.70710677]),
                        np.float32([1e-45, 1e-40, 1.1754942e-38, 1.0, 3.4e38, 0.0, -0.0, -1.0, np.inf, -np.inf,
                                    np.nan])]).astype(np.float32)
    model = make_model([helper.make_node("Log", ["x"], ["y"])], [("x", np.float32, [len(x)])],
                       [("y", np.float32, [len(x)])])
    got = run_twinfer(model, {"x": x})[0]
    with np.errstate(divide="ignore", invalid="ignore"):
        want = np.log(x.astype(np.float64))
    finite = np.isfinite(want) & (want != 0)
    ulps = np.abs(got[finite] - want[finite]) / np.spacing(np.abs(want[finite]).astype(np.float32))
    assert ulps.max() <= 4, (ulps.max(), x[finite][np.argmax(ulps)])
    assert (got[x == 1] == 0).all() and (got[x == 0] == -np.inf).all() and got[x == np.inf][0] == np.inf
    assert np.isnan(got[(x < 0) | np.isnan(x)]).all()


def test_softplus_float32_is_within_4_ulp(rng):
    """The vectorised float32 Softplus, max(x, 0) + log1p(e^-|x|), against
    float64 logaddexp(0, x): within 4 ulp where the result is normal, its
    subnormal tail within 2^-149; inf stays inf, -inf gives 0."""
    x = np.concatenate([_logistic_grid(rng), np.linspace(-20, 20, 40001)]).astype(np.float32)
    model = make_model([helper.make_node("Softplus", ["x"], ["y"])], [("x", np.float32, [len(x)])],
                       [("y", np.float32, [len(x)])])
    got = run_twinfer(model, {"x": x})[0]
    want = np.logaddexp(0.0, x.astype(np.float64))
    want32 = want.astype(np.float32)
    normal = np.isfinite(want) & (want32 >= np.finfo(np.float32).tiny)
    ulps = np.abs(got[normal] - want[normal]) / np.spacing(want32[normal])
    assert ulps.max() <= 4, (ulps.max(), x[normal][np.argmax(ulps)])
    tiny = np.isfinite(want) & ~normal
    assert np.abs(got[tiny] - want[tiny]).max() <= 2 ** -149
    assert got[x == np.inf][0] == np.inf and got[x == -np.inf][0] == 0 and np.isnan(got[np.isnan(x)]).all()


@pytest.mark.parametrize("op,ref", [("Floor", np.floor), ("Ceil", np.ceil), ("Round", np.round)])
def test_float32_rounding_is_exact(rng, op, ref):
    """The vectorised float32 Floor, Ceil and Round (half to even, as NumPy's
    round) equal NumPy bit for bit: halves, values past 2^23 (already
    integers), -0.0 and values that round to -0.0, infinities and NaN."""
    x = np.concatenate([np.arange(-50, 50, 0.25), rng.standard_normal(100001) * 1e3,
                        np.float32([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 8388607.5, 8388609.0, 1e30, -1e30,
                                    -0.0, 0.0, -0.3, 0.3, 1e-40, -1e-40, np.inf, -np.inf, np.nan])]).astype(np.float32)
    model = make_model([helper.make_node(op, ["x"], ["y"])], [("x", np.float32, [len(x)])],
                       [("y", np.float32, [len(x)])])
    got = run_twinfer(model, {"x": x})[0]
    want = ref(x)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got[~np.isnan(want)]), np.signbit(want[~np.isnan(want)]))


@pytest.mark.parametrize("alpha", [1.0, -0.5, 2.75])
def test_thresholded_relu_and_reciprocal_float32_exact(rng, alpha):
    """float32 ThresholdedRelu (x > alpha ? x : 0) and Reciprocal (1 / x)
    equal NumPy's float32 bit for bit on 100,003 values, past one thread's
    chunk: alpha itself and its neighbours, +-0, subnormals, infinities, NaN."""
    a32 = np.float32(alpha)
    edges = np.float32([alpha, np.nextafter(a32, np.float32(9)), np.nextafter(a32, np.float32(-9)), 0.0, -0.0, 1e-40,
                        -1e-40, 3e38, np.inf, -np.inf, np.nan])
    x = np.concatenate([(rng.standard_normal(100003) * 4).astype(np.float32), edges])
    for op, attrs, ref in (("ThresholdedRelu", {"alpha": alpha}, lambda v: np.where(v > a32, v, np.float32(0))),
                           ("Reciprocal", {}, lambda v: np.float32(1) / v)):
        model = make_model([helper.make_node(op, ["x"], ["y"], **attrs)], [("x", np.float32, [len(x)])],
                           [("y", np.float32, [len(x)])], opset=17)
        got = run_twinfer(model, {"x": x})[0]
        with np.errstate(divide="ignore"):
            want = ref(x).astype(np.float32)
        np.testing.assert_array_equal(got.view(np.uint32)[~np.isnan(want)], want.view(np.uint32)[~np.isnan(want)])
        assert np.isnan(got[np.isnan(want)]).all()


@pytest.mark.parametrize("op,attrs", [("HardSigmoid", {}), ("HardSigmoid", {"alpha": 0.31, "beta": 0.43}),
                                      ("HardSigmoid", {"alpha": -1.7, "beta": 0.2}), ("HardSwish", {})])
def test_hard_activations_float32(rng, op, attrs):
    """The vectorised float32 HardSigmoid and HardSwish
    (ops/elementwise/piecewise_activations_fast.cc) against float64 NumPy rounded
    once: a tensor of odd length past one thread's chunk, the clamp's edges,
    infinities and NaN (which passes through)."""
    alpha, beta = attrs.get("alpha", 0.2), attrs.get("beta", 0.5)
    edges = [-beta / alpha, (1 - beta) / alpha] if op == "HardSigmoid" else [-3.0, 3.0]
    x = np.concatenate([rng.standard_normal(100003) * 4, np.float32(edges), np.nextafter(np.float32(edges), 9),
                        np.float32([0.0, -0.0, 1e-40, np.inf, -np.inf, np.nan])]).astype(np.float32)
    model = make_model([helper.make_node(op, ["x"], ["y"], **attrs)], [("x", np.float32, [len(x)])],
                       [("y", np.float32, [len(x)])], opset=17)
    got = run_twinfer(model, {"x": x})[0]
    xd = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        if op == "HardSigmoid":
            # alpha and beta are float32 attributes, applied as float32 values
            want = np.clip(np.float64(np.float32(alpha)) * xd + np.float64(np.float32(beta)), 0, 1)
        else:
            want = xd * np.clip(xd / 6 + 0.5, 0, 1)
    # Rounding x * alpha + beta in float32 near where it crosses 0 costs
    # relative accuracy (the definition's own float arithmetic, as onnxruntime
    # has it too): the bound is an ulp of the result plus an ulp of |x| times
    # the outer factor's size.
    finite = np.isfinite(want)
    scale = np.abs(xd) * (abs(alpha) if op == "HardSigmoid" else np.minimum(np.abs(xd) / 6, 1))
    err = np.abs(got[finite] - want[finite])
    bound = 2 ** -23 * (np.abs(want[finite]) + scale[finite]) + 1e-38
    assert (err <= bound).all(), (err / bound).max()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got[-1])


@pytest.mark.parametrize("op,attrs", [("Elu", {}), ("Elu", {"alpha": 0.7}), ("Selu", {}),
                                      ("Selu", {"alpha": 1.5, "gamma": 2.0})])
def test_elu_and_selu_float32_are_within_4_ulp(rng, op, attrs):
    """The vectorised float32 Elu and Selu (expm1 on the negative side)
    against float64: within 4 ulp, near 0 too; -inf gives -alpha (times
    gamma), NaN stays NaN."""
    x = _logistic_grid(rng)
    model = make_model([helper.make_node(op, ["x"], ["y"], **attrs)], [("x", np.float32, [len(x)])],
                       [("y", np.float32, [len(x)])])
    got = run_twinfer(model, {"x": x})[0]
    xd = x.astype(np.float64)
    alpha = attrs.get("alpha", 1.6732632423543772 if op == "Selu" else 1.0)
    gamma = attrs.get("gamma", 1.0507009873554805 if op == "Selu" else 1.0)
    want = gamma * np.where(xd > 0, xd, alpha * np.expm1(np.minimum(xd, 0)))
    finite = np.isfinite(want) & (want != 0)
    ulps = np.abs(got[finite] - want[finite]) / np.spacing(np.abs(want[finite]).astype(np.float32))
    assert ulps.max() <= 4, (ulps.max(), x[finite][np.argmax(ulps)])
    assert np.isclose(got[x == -np.inf][0], -alpha * gamma) and np.isnan(got[np.isnan(x)]).all()


def test_cast_between_float32_and_float16_is_exact(rng):
    """Cast float32 <-> float16 (the vectorised rows of half_rows.h) equals
    NumPy's conversions bit for bit: every float16 bit pattern to float32
    (subnormals, infinities, NaN), and float32 values at every rounding case
    to float16 (ties to even, the subnormal range, overflow to inf past
    65520, NaN)."""
    h = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
    model = make_model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT)], [("x", np.float16, [len(h)])],
                       [("y", np.float32, [len(h)])])
    want = h.astype(np.float32)
    import twinfer

    # The kernel (F16C's instructions where the CPU has them), and the
    # software form a CPU without them runs.
    soft = np.array(twinfer._core._test_halves_to_floats_soft(h.view(np.uint16).tolist()), np.float32)
    kernel = run_twinfer(model, {"x": h})[0]
    for got in (kernel, soft):
        assert (np.isnan(got) == np.isnan(want)).all()
        np.testing.assert_array_equal(got[~np.isnan(want)].view(np.uint32), want[~np.isnan(want)].view(np.uint32))
    np.testing.assert_array_equal(kernel.view(np.uint32), soft.view(np.uint32))  # NaN payloads alike too
    # float32 -> float16: each half's neighbourhood (exact, the midpoint, just
    # either side of it), random values over the whole range, the edges.
    hf = h[np.isfinite(h)].astype(np.float32)
    mid = (hf[:-1].astype(np.float64) + hf[1:]) / 2
    x = np.concatenate([hf, mid.astype(np.float32), np.nextafter(mid.astype(np.float32), np.float32(np.inf)),
                        np.nextafter(mid.astype(np.float32), np.float32(-np.inf)),
                        (rng.standard_normal(200001) * np.exp(rng.uniform(-20, 12, 200001))).astype(np.float32),
                        np.float32([65504, 65519.99, 65520, 1e30, -1e30, 2 ** -25, 2 ** -26, 2 ** -24 * 1.5,
                                    np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-45])]).astype(np.float32)
    model = make_model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT16)], [("x", np.float32, [len(x)])],
                       [("y", np.float16, [len(x)])])
    x[-3] = np.uint32(0x7fc12345).view(np.float32)  # NaNs with payloads, quiet and signalling
    x[-2] = np.uint32(0xff812345).view(np.float32)
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    soft = np.array(twinfer._core._test_floats_to_halves_soft(x.tolist()), np.uint16).view(np.float16)
    kernel = run_twinfer(model, {"x": x})[0]
    for got in (kernel, soft):
        assert (np.isnan(got) == np.isnan(want)).all()
        np.testing.assert_array_equal(got[~np.isnan(want)].view(np.uint16), want[~np.isnan(want)].view(np.uint16))
    np.testing.assert_array_equal(kernel.view(np.uint16), soft.view(np.uint16))


def test_sqrt_float32_is_correctly_rounded():
    """The vectorised float32 Sqrt: the instruction, equal to NumPy's float32
    sqrt bit for bit; negative inputs NaN, -0 stays -0."""
    x = np.concatenate([np.linspace(0, 1e4, 100001), np.float32([0.0, -0.0, 1e-45, 1e-40, np.inf, -1.0, -np.inf,
                                                                  np.nan, 3.4e38])]).astype(np.float32)
    model = make_model([helper.make_node("Sqrt", ["x"], ["y"])], [("x", np.float32, [len(x)])],
                       [("y", np.float32, [len(x)])])
    got = run_twinfer(model, {"x": x})[0]
    with np.errstate(invalid="ignore"):
        want = np.sqrt(x)
    np.testing.assert_array_equal(got, want)
    assert np.signbit(got[(x == 0) & np.signbit(x)]).all()


def test_silu_float32_is_within_4_ulp(rng):
    """Swish with alpha 1 (SiLU), the vectorised float32 loop, against float64."""
    x = _logistic_grid(rng)
    model = make_model([helper.make_node("Swish", ["x"], ["y"], alpha=1.0)], [("x", np.float32, [len(x)])],
                       [("y", np.float32, [len(x)])], opset=24)
    got = run_twinfer(model, {"x": x})[0]
    xd = x.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        want = xd / (1 + np.exp(-xd))
    # Within 4 ulp where sigmoid(x) is a normal float (x above -87); below,
    # the subnormal sigmoid's rounding (2^-150) times |x| <= 104.
    normal = np.isfinite(x) & (x > -87) & (want != 0)
    ulps = np.abs(got[normal] - want[normal]) / np.spacing(np.abs(want[normal]).astype(np.float32))
    assert ulps.max() <= 4, (ulps.max(), x[normal][np.argmax(ulps)])
    tiny = np.isfinite(x) & ~normal
    assert np.abs(got[tiny] - want[tiny]).max() <= 2e-43
    assert got[x == np.inf][0] == np.inf and np.isnan(got[x == -np.inf][0]) and np.isnan(got[np.isnan(x)][0])


def _trig_grid(rng):
    """Dense over a few periods, fresh random values out to 1e4, both sides of
    the octant reduction's 8192 limit, near multiples of pi / 4 (results near
    0 and 1), tiny values, and the edges."""
    near = (np.arange(-64, 65) * (np.pi / 4))[:, None] + np.linspace(-1e-4, 1e-4, 41)[None, :]
    return np.concatenate([np.linspace(-20, 20, 200001), rng.standard_normal(50001) * 100,
                           rng.uniform(-1e4, 1e4, 20001), near.ravel(),
                           np.float32([8191.99, 8192.0, 8192.01, -8192.0, 1e5, -3e7, 3.4e38, 1e-30, -1e-30, 1e-45,
                                       0.0, -0.0, np.inf, -np.inf, np.nan])]).astype(np.float32)


@pytest.mark.parametrize("op", ["Sin", "Cos", "Atan"])
def test_sin_cos_atan_float32_are_within_4_ulp(rng, op):
    """The vectorised float32 Sin, Cos (octant reduction below |x| = 8192, libm
    above) and Atan (ops/elementwise/trig_fast.cc) against float64 NumPy:
    within 4 ulp of the result, or of float32's smallest normal where the
    result is smaller; the infinities give NaN for Sin and Cos and +-pi/2 for
    Atan; NaN stays NaN; -0 gives -0 for Sin and Atan."""
    x = _trig_grid(rng)
    if op == "Atan":
        x = np.concatenate([x, np.float32([0.41421354, 0.41421357, 2.4142134, 2.4142137, 1.0, -1.0, 1e30])])
    model = make_model([helper.make_node(op, ["x"], ["y"])], [("x", np.float32, [len(x)])],
                       [("y", np.float32, [len(x)])])
    got = run_twinfer(model, {"x": x})[0]
    want = {"Sin": np.sin, "Cos": np.cos, "Atan": np.arctan}[op](x.astype(np.float64))
    finite = np.isfinite(x)
    spacing = np.spacing(np.maximum(np.abs(want[finite]), np.finfo(np.float32).tiny).astype(np.float32))
    ulps = np.abs(got[finite] - want[finite]) / spacing
    assert ulps.max() <= 4, (ulps.max(), x[finite][np.argmax(ulps)])
    assert np.isnan(got[np.isnan(x)]).all()
    if op == "Atan":
        assert got[x == np.inf][0] == np.float32(np.pi / 2) and got[x == -np.inf][0] == -np.float32(np.pi / 2)
    else:
        assert np.isnan(got[np.isinf(x)]).all()
    if op != "Cos":
        assert np.signbit(got[x == 0]).tolist() == np.signbit(x[x == 0]).tolist()


@pytest.mark.parametrize("op", ["Asin", "Acos"])
def test_asin_acos_float32_are_within_4_ulp(rng, op):
    """The vectorised float32 Asin and Acos (trig_fast.cc: |x| above 1/2 folded
    through sqrt((1 - |x|) / 2)) against float64 NumPy over [-1, 1] densely,
    both sides of the fold at 1/2, next to +-1 and 0; outside [-1, 1] and NaN
    give NaN; asin(-0) is -0."""
    half = np.float32(0.5)
    x = np.concatenate([np.linspace(-1, 1, 400001), rng.uniform(-1, 1, 50001),
                        1 - np.logspace(-7.5, -1, 2001), -1 + np.logspace(-7.5, -1, 2001), np.logspace(-30, -1, 2001),
                        [np.nextafter(half, 0), half, np.nextafter(half, 1), -half, 1.0, -1.0, 0.0, -0.0,
                         1.0000001, -1.5, np.inf, -np.inf, np.nan]]).astype(np.float32)
    model = make_model([helper.make_node(op, ["x"], ["y"])], [("x", np.float32, [len(x)])],
                       [("y", np.float32, [len(x)])])
    got = run_twinfer(model, {"x": x})[0]
    inside = np.abs(x) <= 1
    with np.errstate(invalid="ignore"):
        want = {"Asin": np.arcsin, "Acos": np.arccos}[op](x.astype(np.float64))
    spacing = np.spacing(np.maximum(np.abs(want[inside]), np.finfo(np.float32).tiny).astype(np.float32))
    ulps = np.abs(got[inside] - want[inside]) / spacing
    assert ulps.max() <= 4, (ulps.max(), x[inside][np.argmax(ulps)])
    assert np.isnan(got[~inside]).all()
    if op == "Asin":
        assert np.signbit(got[x == 0]).tolist() == np.signbit(x[x == 0]).tolist()


def test_celu_float32_is_within_4_ulp(rng):
    """The vectorised float32 Celu (alpha > 0: alpha * expm1(x / alpha) below 0)
    against float64, for two alphas; -0 gives +0 and NaN NaN, as the general
    kernel's max(0, x) + min(0, ...) does; a negative alpha keeps the general kernel."""
    x = _logistic_grid(rng)
    for alpha in (1.0, 0.37):
        model = make_model([helper.make_node("Celu", ["x"], ["y"], alpha=alpha)], [("x", np.float32, [len(x)])],
                           [("y", np.float32, [len(x)])], opset=12)
        got = run_twinfer(model, {"x": x})[0]
        xd = x.astype(np.float64)
        a = np.float64(np.float32(alpha))
        with np.errstate(over="ignore", invalid="ignore"):
            want = np.where(xd < 0, a * np.expm1(xd / a), xd)
        normal = np.isfinite(want) & (np.abs(want) >= np.finfo(np.float32).tiny)
        ulps = np.abs(got[normal] - want[normal]) / np.spacing(np.abs(want[normal]).astype(np.float32))
        assert ulps.max() <= 4, (alpha, ulps.max(), x[normal][np.argmax(ulps)])
        assert np.isnan(got[np.isnan(x)]).all() and not np.signbit(got[x == 0]).any()
        assert got[x == np.inf][0] == np.inf and got[x == -np.inf][0] == np.float32(-a)
    model = make_model([helper.make_node("Celu", ["x"], ["y"], alpha=-0.5)], [("x", np.float32, [5])],
                       [("y", np.float32, [5])], opset=12)
    v = np.float32([-2, -0.1, 0, 0.3, 4])
    want = np.maximum(0, v) + np.minimum(0, -0.5 * np.expm1(v / -0.5))
    np.testing.assert_allclose(run_twinfer(model, {"x": v})[0], want, rtol=1e-6)


def test_gelu_tanh_float32_against_float64(rng):
    """GELU's tanh form, vectorised as x * sigmoid(2z): within 1e-6 relative
    where |x| < 3, and within what float32 rounding of z costs in the tails
    (exp's argument reaches -76 there: about 2e-5 relative); -inf gives NaN
    and large negative x -0, as onnxruntime and PyTorch do."""
    x = _logistic_grid(rng)
    model = make_model([helper.make_node("Gelu", ["x"], ["y"], approximate="tanh")],
                       [("x", np.float32, [len(x)])], [("y", np.float32, [len(x)])], opset=20)
    got = run_twinfer(model, {"x": x})[0]
    xd = x.astype(np.float64)
    z = np.sqrt(2 / np.pi) * (xd + 0.044715 * xd**3)
    with np.errstate(over="ignore", invalid="ignore"):
        want = xd / (1 + np.exp(-2 * z))  # 0.5 x (1 + tanh z), without its cancellation below 0
    finite = np.isfinite(x)
    rel = np.abs(got[finite] - want[finite]) / np.maximum(np.abs(want[finite]), 1e-38)
    near = np.abs(x[finite]) < 3
    assert rel[near].max() <= 1e-6, (rel[near].max(), x[finite][near][np.argmax(rel[near])])
    assert rel.max() <= 3e-5, (rel.max(), x[finite][np.argmax(rel)])
    assert got[x == np.inf][0] == np.inf and np.isnan(got[x == -np.inf][0]) and np.isnan(got[np.isnan(x)][0])
    assert np.signbit(got[x == -103.9][0]) and got[x == -103.9][0] == 0


@pytest.mark.parametrize("op,dts,opset", UNARY_INT, ids=[c[0] for c in UNARY_INT])
def test_unary_int(rng, op, dts, opset):
    for dt in dts:
        info = np.iinfo(dt)
        if op == "Shrink":  # converted through float32: keep values exact there
            x = rand_ints(rng, (4, 9), dt, -1000, 1000)
            attrs = {"lambd": 1.5, "bias": 1.0}
        else:
            x = with_edges(rand_ints(rng, (4, 9), dt), [info.min, info.max, 0]).astype(dt)
            attrs = {}
        check(op, [("x", x)], attrs, opset=opset)


@pytest.mark.parametrize("dt", FLOATS, ids=ids(FLOATS))
@pytest.mark.parametrize("pos,neg", [(1, 1), (1, 0), (0, 1), (0, 0)])
def test_isinf_isnan(rng, dt, pos, neg):
    x = as_dtype(with_edges(rng.standard_normal((5, 7)), [INF, -INF, NAN, 0.0, 1e30, -1e30]), dt)
    check("IsInf", [("x", x)], {"detect_positive": pos, "detect_negative": neg}, out=[BOOL])
    check("IsNaN", [("x", x)], out=[BOOL])


def test_not(rng):
    for shape in [(3, 5, 7), ()]:
        check("Not", [("x", rng.random(shape) < 0.5)])


# ---------------------------------------------------------------------------
# Binary ops with broadcasting
# ---------------------------------------------------------------------------
SHAPE_PAIRS = [
    ((3, 5, 7), (3, 5, 7)),  # same shape: one flat loop
    ((2, 3, 5, 7), (5, 1)),
    ((4, 1, 6), (1, 5, 1)),  # both sides broadcast
    ((), (3, 4)),  # scalar on the left
    ((13,), (1,)),
    ((2, 3, 4, 5), (3, 1, 1)),  # NCHW + per-channel bias
    ((2, 7, 6), (6,)),  # [B, S, H] + [H]
    ((6, 1), (1, 6, 5)),  # output bigger than both
    ((1,), ()),
]


def binary_data(rng, op, dt, shape):
    if dt.kind == "f" or dt == BF16:
        x = rng.standard_normal(shape) * 4
        if op == "Pow":
            x = np.abs(x) + 0.1
        return as_dtype(x, dt)
    if dt.kind == "b":
        return rng.random(shape) < 0.5
    # Small integers: no overflow that onnxruntime leaves undefined (signed),
    # and equal pairs often enough for comparisons.
    lo = -20 if dt.kind == "i" else 0
    return rand_ints(rng, shape, dt, lo, 20)


def fix_divisor(op, b):
    """onnxruntime crashes (SIGFPE) on integer division by zero: keep those out
    (twinfer's own answer, 0, is checked in test_int_div_mod_by_zero)."""
    if op in ("Div", "Mod") and b.dtype.kind in "iu":
        b = b.copy()
        b[b == 0] = 1
    return b


ARITH = ["Add", "Sub", "Mul", "Div"]


@pytest.mark.parametrize("op", ARITH)
@pytest.mark.parametrize("sa,sb", SHAPE_PAIRS, ids=[f"{a}+{b}" for a, b in SHAPE_PAIRS])
def test_arith_broadcast(rng, op, sa, sb):
    a, b = binary_data(rng, op, F32, sa), binary_data(rng, op, F32, sb)
    check(op, [("a", a), ("b", b)])
    check(op, [("a", b), ("b", a)])  # and the other way round


@pytest.mark.parametrize("op", ARITH)
@pytest.mark.parametrize("dt", FLOATS + INTS, ids=ids(FLOATS + INTS))
def test_arith_dtypes(rng, op, dt):
    for sa, sb in [((3, 5, 7), (3, 5, 7)), ((4, 1, 6), (1, 5, 1)), ((), (2, 3))]:
        a, b = binary_data(rng, op, dt, sa), fix_divisor(op, binary_data(rng, op, dt, sb))
        check(op, [("a", a), ("b", b)])


def test_float_div_edges():
    a = np.array([1.0, -1.0, 0.0, INF, NAN, 1e30], F32)
    b = np.array([0.0, 0.0, 0.0, INF, 1.0, 1e-30], F32)
    check("Div", [("a", a), ("b", b)])


@pytest.mark.parametrize("dt", INTS, ids=ids(INTS))
def test_int_div_mod_by_zero(rng, dt):
    """x / 0 and x % 0 are 0 (NumPy's answer; onnxruntime crashes); INT_MIN / -1
    wraps. Reference: NumPy."""
    info = np.iinfo(dt)
    a = with_edges(rand_ints(rng, (17,), dt), [5, info.min, info.max, 0, info.min]).astype(dt)
    b = with_edges(rand_ints(rng, (17,), dt, -5, 5), [0, 0, 0, 0, -1 if dt.kind == "i" else 1]).astype(dt)
    safe = np.where(b == 0, 1, b).astype(dt)
    with np.errstate(all="ignore"):
        # C-style truncating division, from floor division corrected toward zero.
        q = (a // safe).astype(dt)
        q = np.where((a % safe != 0) & ((a < 0) != (safe < 0)), q + 1, q).astype(dt)
        exp_div = np.where(b == 0, 0, q).astype(dt)
        exp_mod = np.where(b == 0, 0, np.mod(a, safe)).astype(dt)
        exp_fmod = np.where(b == 0, 0, np.fmod(a, safe)).astype(dt)
    if dt.kind == "i":  # INT_MIN / -1 wraps to INT_MIN, the remainder is 0
        exp_div[4], exp_mod[4], exp_fmod[4] = info.min, 0, 0
    for op, attrs, exp in [("Div", {}, exp_div), ("Mod", {}, exp_mod), ("Mod", {"fmod": 1}, exp_fmod)]:
        model, feeds = build(op, [("a", a), ("b", b)], attrs, [dt], 17)
        assert_close(twinfer_run(model, feeds)[0], exp, what=f"{op} {attrs}")


# fmod=0 (remainder with the divisor's sign) for floats is checked in
# tests/test_ops_index.py against the ONNX reference (numpy.mod).
MOD_CASES = [(d, 0) for d in INTS] + [(d, 1) for d in FLOATS + INTS]


@pytest.mark.parametrize("dt,fmod", MOD_CASES, ids=[f"{d.name}-fmod{f}" for d, f in MOD_CASES])
def test_mod(rng, dt, fmod):
    for sa, sb in [((3, 5, 7), (3, 5, 7)), ((2, 1, 6), (5, 1))]:
        a = binary_data(rng, "Mod", dt, sa)
        b = fix_divisor("Mod", binary_data(rng, "Mod", dt, sb))
        check("Mod", [("a", a), ("b", b)], {"fmod": fmod})


POW_CASES = [
    (F32, F32), (F64, F64), (F16, F16), (BF16, BF16),  # float ** float
    (F32, np.dtype(np.int32)), (F32, np.dtype(np.int64)), (F64, np.dtype(np.int8)),  # float ** int
    (F16, np.dtype(np.int64)), (F32, F16),
    (np.dtype(np.int32), np.dtype(np.int32)), (np.dtype(np.int64), np.dtype(np.int64)),  # int ** int
    (np.dtype(np.int64), np.dtype(np.uint8)), (np.dtype(np.int32), np.dtype(np.int64)),
    (np.dtype(np.int32), F32),  # int ** float: pow in double, truncated (as onnxruntime)
]


@pytest.mark.parametrize("da,db", POW_CASES, ids=[f"{a.name}^{b.name}" for a, b in POW_CASES])
def test_pow(rng, da, db):
    for sa, sb in [((3, 5, 7), (3, 5, 7)), ((4, 1, 6), (5, 1)), ((2, 3), ())]:
        if da.kind in "iu":
            # int ** float with a negative base is NaN, whose conversion to int
            # is undefined in onnxruntime: non-negative bases there.
            a = rand_ints(rng, sa, da, 0 if db.kind == "f" else -6, 6)
        else:
            a = as_dtype(with_edges(rng.uniform(0.1, 4, sa), [-2.0, 0.0, -0.5]), da)
        if db.kind in "iu":
            b = rand_ints(rng, sb, db, -3 if db.kind == "i" else 0, 7)
            if da.kind in "iu" and db.kind == "i":
                # 0 ** -n is 1/0: onnxruntime converts inf to int (undefined,
                # INT_MIN on x86); twinfer gives 0. Keep those pairs out.
                a = np.where(a == 0, 1, a).astype(da)
        else:
            b = as_dtype(rng.uniform(-3, 3, sb), db)
            if da.kind in "iu":
                b = as_dtype(rng.uniform(0, 3, sb), db)
        check("Pow", [("a", a), ("b", b)], out=[da])


SQUARE_DTYPES = [F32, F64, F16, np.dtype(np.int32), np.dtype(np.int64)]


@pytest.mark.parametrize("dt", SQUARE_DTYPES, ids=ids(SQUARE_DTYPES))
def test_pow_constant_square(rng, dt):
    """A constant exponent of 2 takes the x*x path."""
    x = binary_data(rng, "Add", dt, (3, 5, 7))
    e = np.array(2, np.float32 if dt.kind == "f" else np.int32)
    model = make_model([helper.make_node("Pow", ["x", "e"], ["y"])], [("x", dt, list(x.shape))],
                       [("y", dt, None)], initializers=[("e", e)])
    got = twinfer_run(model, {"x": x})[0]
    if dt == F16:  # x*x in float32, rounded to float16
        exp = (x.astype(F32) ** 2).astype(F16)
    else:
        exp = reference(model, {"x": x})[0]
    rtol, atol = TOL.get(dt, (0, 0))
    assert_close(got, exp, rtol=rtol, atol=atol)


CMP = ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]
CMP_DTYPES = FLOATS + INTS


@pytest.mark.parametrize("op", CMP)
@pytest.mark.parametrize("dt", CMP_DTYPES, ids=ids(CMP_DTYPES))
def test_compare(rng, op, dt):
    for sa, sb in [((3, 5, 7), (3, 5, 7)), ((4, 1, 6), (1, 5, 1)), ((), (2, 3)), ((2, 3, 4, 5), (3, 1, 1))]:
        if dt.kind in "iu":
            a, b = rand_ints(rng, sa, dt, 0, 3), rand_ints(rng, sb, dt, 0, 3)
        else:
            a = as_dtype(with_edges(rng.integers(-2, 2, sa).astype(F64), [NAN, INF]), dt)
            b = as_dtype(with_edges(rng.integers(-2, 2, sb).astype(F64), [NAN, INF]), dt)
        check(op, [("a", a), ("b", b)], out=[BOOL])


@pytest.mark.parametrize("op", ["And", "Or", "Xor", "Equal"])
def test_logic(rng, op):
    for sa, sb in SHAPE_PAIRS:
        check(op, [("a", rng.random(sa) < 0.5), ("b", rng.random(sb) < 0.5)], out=[BOOL])


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
@pytest.mark.parametrize("dt", INTS, ids=ids(INTS))
def test_bitwise(rng, op, dt):
    for sa, sb in [((3, 5, 7), (3, 5, 7)), ((4, 1, 6), (1, 5, 1))]:
        check(op, [("a", rand_ints(rng, sa, dt)), ("b", rand_ints(rng, sb, dt))], opset=18)


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dt", UINTS, ids=ids(UINTS))
def test_bitshift(rng, dt, direction):
    bits = dt.itemsize * 8
    for sa, sb in [((3, 5, 7), (3, 5, 7)), ((4, 1, 6), (5, 1)), ((3,), ())]:
        # Shifts of the bit width or more are undefined in onnxruntime (C++):
        # they stay out here and are checked against NumPy below.
        a, b = rand_ints(rng, sa, dt), rand_ints(rng, sb, dt, 0, bits - 1)
        check("BitShift", [("a", a), ("b", b)], {"direction": direction})
    # twinfer: shifting by >= the width gives 0, like NumPy.
    a = rand_ints(rng, (5,), dt)
    b = np.array([bits, bits + 1, 255, bits - 1, 0], dt)
    model, feeds = build("BitShift", [("a", a), ("b", b)], {"direction": direction}, [dt], 17)
    shift = np.left_shift if direction == "LEFT" else np.right_shift
    exp = np.where(b >= bits, 0, shift(a, np.minimum(b, bits - 1))).astype(dt)
    assert_close(twinfer_run(model, feeds)[0], exp)


PRELU_DTYPES = FLOATS + [np.dtype(t) for t in (np.int32, np.int64, np.uint32, np.uint64)]


@pytest.mark.parametrize("dt", PRELU_DTYPES, ids=ids(PRELU_DTYPES))
def test_prelu(rng, dt):
    for slope_shape in [(3, 1, 1), (7,), (1,), (), (2, 3, 5, 7), (5, 1)]:
        x = binary_data(rng, "PRelu", dt, (2, 3, 5, 7))
        s = binary_data(rng, "PRelu", dt, slope_shape)
        check("PRelu", [("x", x), ("slope", s)], opset=16)


# ---------------------------------------------------------------------------
# Variadic ops
# ---------------------------------------------------------------------------
VARIADIC_SHAPES = [
    [(3, 5, 7)],
    [(3, 5, 7), (3, 5, 7)],
    [(3, 1, 5), (4, 1), (5,)],  # the first input is not the output's shape
    [(), (2, 3), (1, 3), (2, 1)],
]


@pytest.mark.parametrize("op,dts", [("Max", FLOATS + INTS), ("Min", FLOATS + INTS), ("Sum", FLOATS), ("Mean", FLOATS)])
def test_variadic(rng, op, dts):
    for dt in dts:
        for shapes in VARIADIC_SHAPES:
            ins = [(f"x{i}", binary_data(rng, op, dt, s)) for i, s in enumerate(shapes)]
            if op == "Mean" and dt == F64:
                # onnxruntime has no float64 Mean, and the reference evaluator's
                # adds in place into the first input (failing when that is not
                # the output's shape): NumPy is the reference here.
                model, feeds = build(op, ins, {}, [dt], 17)
                exp = sum(np.broadcast_arrays(*(a for _, a in ins))) / len(ins)
                assert_close(twinfer_run(model, feeds)[0], exp, *TOL[F64])
            else:
                check(op, ins)


def test_max_min_nan():
    a = np.array([NAN, 1.0, 2.0, NAN], F32)
    b = np.array([1.0, NAN, 3.0, NAN], F32)
    for op in ("Max", "Min"):
        check(op, [("a", a), ("b", b)])


# ---------------------------------------------------------------------------
# Where, Clip, Cast, Identity, Dropout
# ---------------------------------------------------------------------------
WHERE_SHAPES = [
    ((3, 5, 7), (3, 5, 7), (3, 5, 7)),
    ((5, 7), (3, 1, 7), ()),
    ((4, 1, 1), (1, 5, 1), (1, 1, 6)),
    ((), (2, 3), (2, 3)),
]


@pytest.mark.parametrize("dt", ALL, ids=ids(ALL))
def test_where(rng, dt):
    for sc, sx, sy in WHERE_SHAPES:
        c = rng.random(sc) < 0.5
        check("Where", [("c", c), ("x", binary_data(rng, "Where", dt, sx)), ("y", binary_data(rng, "Where", dt, sy))],
              out=[dt])


CLIP_CASES = [(True, True), (True, False), (False, True), (False, False)]


@pytest.mark.parametrize("dt", FLOATS + INTS, ids=ids(FLOATS + INTS))
@pytest.mark.parametrize("has_min,has_max", CLIP_CASES)
def test_clip(rng, dt, has_min, has_max):
    x = binary_data(rng, "Clip", dt, (3, 5, 7))
    if dt.kind in "iu":
        lo, hi = np.array(3 if dt.kind == "u" else -5, dt), np.array(11, dt)
    else:
        lo, hi = as_dtype(-1.5, dt), as_dtype(2.25, dt)
    # min/max as graph inputs: the kernel reads them when it runs.
    check("Clip", [("x", x), ("lo", lo if has_min else None), ("hi", hi if has_max else None)])


def test_clip_min_above_max_and_constants(rng):
    x = rng.standard_normal((4, 9)).astype(F32)
    check("Clip", [("x", x), ("lo", np.array(1.0, F32)), ("hi", np.array(-1.0, F32))])
    # Bounds as initializers.
    model = make_model([helper.make_node("Clip", ["x", "lo", "hi"], ["y"])], [("x", F32, [4, 9])],
                       [("y", F32, None)], initializers=[("lo", np.array(-0.5, F32)), ("hi", np.array(0.7, F32))])
    assert_close(twinfer_run(model, {"x": x})[0], reference(model, {"x": x})[0])


def cast_source(rng, src, dst, shape):
    """Values whose conversion is defined in onnxruntime (C++ static_cast).
    Float -> integer of NaN, inf or a value outside the target's range is
    undefined behaviour there, so those values are left out of the comparison
    (twinfer's own rule -- NaN -> 0, saturate -- is checked in test_cast_float_to_int_edges)."""
    if src == BOOL:
        return rng.random(shape) < 0.5
    if src.kind in "iu":
        return rand_ints(rng, shape, src)
    if dst.kind in "iu":
        info = np.iinfo(dst)
        lo, hi = max(info.min, -200), min(info.max, 200)
        if src in HALF:  # keep within what 8 significant bits hold exactly
            lo, hi = max(lo, -120), min(hi, 120)
        x = rng.uniform(lo, hi + 0.99, shape)
        return as_dtype(with_edges(x, [-0.75, 0.75, 0.0, -0.0]) if lo <= -1 else with_edges(x, [0.75, 0.0]), src)
    # float -> float/bool: special values are well defined.
    edges = [NAN, INF, -INF, 0.0, -0.0, 1e5, -1e5, 70000.0, 1e-8, 3e38]
    return as_dtype(with_edges(rng.standard_normal(shape) * 100, edges), src)


@pytest.mark.parametrize("src", ALL, ids=ids(ALL))
@pytest.mark.parametrize("dst", ALL, ids=ids(ALL))
def test_cast(rng, src, dst):
    x = cast_source(rng, src, dst, (3, 5, 7))
    to = helper.np_dtype_to_tensor_dtype(dst) if dst != BF16 else TensorProto.BFLOAT16
    model, feeds = build("Cast", [("x", x)], {"to": to}, [dst], 19)
    got = twinfer_run(model, feeds)[0]
    # Expected: ORT on the same model; the bf16 source is a float32 feed
    # rounded by the graph's own Cast, which ORT does too.
    exp = reference(model, feeds)[0]
    assert_close(got, exp, rtol=0, atol=0, what=f"Cast {src} -> {dst}")


@pytest.mark.parametrize("dt", [F32, F64, F16], ids=ids([F32, F64, F16]))
def test_cast_float_to_int_edges(dt):
    """twinfer's rule where C++ (and so onnxruntime) is undefined: NaN -> 0,
    out-of-range values saturate, otherwise truncate toward zero. Reference: NumPy."""
    x = np.array([NAN, INF, -INF, 1e30 if dt != F16 else 60000, -1e30 if dt != F16 else -60000,
                  300.5, -300.5, -2.9, 2.9, -0.5], dt)
    for to in INTS:
        info = np.iinfo(to)

        def saturate(v):  # in Python ints, exact at the 64-bit limits
            if np.isnan(v):
                return 0
            t = info.max if v == INF else info.min if v == -INF else int(np.trunc(v))
            return min(max(t, int(info.min)), int(info.max))

        exp = np.array([saturate(float(v)) for v in x], dtype=to)
        model, feeds = build("Cast", [("x", x)], {"to": helper.np_dtype_to_tensor_dtype(to)}, [to], 19)
        assert_close(twinfer_run(model, feeds)[0], exp, what=f"{dt} -> {to}")


def test_cast_float32_to_int32_and_bool_rows(rng):
    """The vectorised float32 -> int32 / bool, int32 -> float32 and bool -> float32 rows
    (ops/elementwise/cast_rows.cc) on 10,007 values with the edges scattered
    through them, so that they land in vector lanes and in the tail: NaN -> 0,
    saturation at 2^31 (2147483520 is the last float below it), truncation
    toward zero; bool is x != 0 (NaN true, -0 false); and bool -> float32.
    Reference: Python's own integers."""
    edges = np.float32([np.nan, np.inf, -np.inf, 2147483520.0, 2147483648.0, -2147483648.0, -2147483904.0,
                        3e38, -3e38, 0.0, -0.0, 0.5, -0.5, 1.99999988, -1.99999988, 1e-45, -7.5, 16777217.0])
    x = (rng.standard_normal(10007) * 1e4).astype(np.float32)
    x[rng.choice(len(x), 300, replace=False)] = np.resize(edges, 300)
    x[-len(edges):] = edges

    def to_int32(v):
        if np.isnan(v):
            return 0
        t = 2**31 - 1 if v == np.inf else -2**31 if v == -np.inf else int(np.trunc(np.float64(v)))
        return min(max(t, -2**31), 2**31 - 1)

    for to, want in ((np.int32, np.array([to_int32(v) for v in x], np.int32)), (np.bool_, np.array(
            [bool(v != 0) for v in x.tolist()]))):
        model, feeds = build("Cast", [("x", x)], {"to": helper.np_dtype_to_tensor_dtype(np.dtype(to))}, [to], 19)
        np.testing.assert_array_equal(twinfer_run(model, feeds)[0], want)
    ints = rng.integers(-2**31, 2**31, 10007, dtype=np.int64).astype(np.int32)
    ints[:4] = [2**31 - 1, -2**31, 16777217, -16777219]
    model, feeds = build("Cast", [("x", ints)], {"to": TensorProto.FLOAT}, [F32], 19)
    want = np.array([float(np.float32(float(v))) for v in ints.tolist()], np.float32)  # round to nearest even
    np.testing.assert_array_equal(twinfer_run(model, feeds)[0], want)
    bools = rng.random(10007) < 0.3  # bool -> float32 (a mask, a one-hot)
    model, feeds = build("Cast", [("x", bools)], {"to": TensorProto.FLOAT}, [F32], 19)
    np.testing.assert_array_equal(twinfer_run(model, feeds)[0], np.where(bools.tolist(), 1.0, 0.0).astype(np.float32))


@pytest.mark.parametrize("src,like", [(F32, np.dtype(np.int32)), (np.dtype(np.int64), F16), (BOOL, F64), (F64, BOOL)])
def test_castlike(rng, src, like):
    x = cast_source(rng, src, like, (4, 6))
    check("CastLike", [("x", x), ("like", np.zeros((2,), like))], out=[like], opset=15)


@pytest.mark.parametrize("dt", ALL, ids=ids(ALL))
def test_identity(rng, dt):
    for shape in [(3, 5, 7), ()]:
        check("Identity", [("x", binary_data(rng, "Identity", dt, shape))])


@pytest.mark.parametrize("dt", [F32, F64, F16], ids=ids([F32, F64, F16]))
@pytest.mark.parametrize("mask", [False, True])
@pytest.mark.parametrize("extra", ["none", "ratio", "ratio+training"])
def test_dropout_inference(rng, dt, mask, extra):
    """Inference: output = input, the optional mask is all true."""
    x = binary_data(rng, "Dropout", dt, (3, 5, 7))
    inits = []
    if extra != "none":
        inits.append(("ratio", np.array(0.3, F32)))
    if extra == "ratio+training":
        inits.append(("training_mode", np.array(False)))
    outs = ["y", "m"] if mask else ["y"]
    model = make_model([helper.make_node("Dropout", ["x"] + [n for n, _ in inits], outs, name="drop")],
                       [("x", dt, list(x.shape))], [("y", dt, None)] + ([("m", BOOL, None)] if mask else []),
                       initializers=inits, opset=13)
    got = twinfer_run(model, {"x": x})
    exp = reference(model, {"x": x})
    assert len(got) == len(exp) == len(outs)
    for g, e in zip(got, exp):
        assert_close(g, e, rtol=0, atol=0)


def test_dropout_training_mode_is_an_error(rng):
    x = rng.standard_normal((3, 4)).astype(F32)
    model = make_model([helper.make_node("Dropout", ["x", "r", "t"], ["y"], name="drop")], [("x", F32, [3, 4])],
                       [("y", F32, None)], initializers=[("r", np.array(0.5, F32)), ("t", np.array(True))],
                       opset=13)
    expect_error(model, {"x": x}, "drop", "training")


# ---------------------------------------------------------------------------
# Bigger tensors: the multi-threaded split of each loop (chunks starting in
# the middle of a broadcast row) must give the same answer.
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_parallel_split(rng, threads):
    a = rng.standard_normal((3, 7, 20011)).astype(F32)
    b = rng.standard_normal((7, 1)).astype(F32)
    c = rng.standard_normal((20011,)).astype(F32)
    check("Add", [("a", a), ("b", b)], num_threads=threads)
    check("Mul", [("a", a), ("c", c)], num_threads=threads)
    check("Exp", [("a", a)], num_threads=threads)
    check("Where", [("cond", a > 0), ("b", b), ("c", c)], out=[F32], num_threads=threads)
    check("Cast", [("a", a)], {"to": TensorProto.FLOAT16}, out=[F16], num_threads=threads)


@pytest.mark.parametrize(
    "op,shapes",
    [("Add", [(0, 3), (3,)]), ("Exp", [(2, 0)]), ("Less", [(0, 3), (1, 3)]), ("Sum", [(0, 3), (1, 3), (3,)]),
     ("Where", [(0, 1), (0, 3), (1, 3)]), ("Cast", [(2, 0)])],
)
def test_empty_tensors(op, shapes):
    ins = [(f"x{i}", np.zeros(s, BOOL if op == "Where" and i == 0 else F32)) for i, s in enumerate(shapes)]
    out = {"Less": BOOL, "Cast": F16}.get(op, F32)
    attrs = {"to": TensorProto.FLOAT16} if op == "Cast" else {}
    check(op, ins, attrs, out=[out])


def test_symbolic_dims_and_default_options(rng):
    """Shape rules at load time see symbolic dims ('N'); kernels are built for
    the fed shapes. Default load options (optimisation passes on)."""
    import twinfer

    nodes = [
        helper.make_node("Add", ["x", "b"], ["s"]),
        helper.make_node("Where", ["c", "s", "x"], ["w"]),
        helper.make_node("Cast", ["w"], ["y"], to=TensorProto.FLOAT16),
        helper.make_node("Less", ["x", "b"], ["z"]),
    ]
    model = make_model(nodes, [("x", F32, ["N", 5, 1]), ("b", F32, [1, 7]), ("c", BOOL, ["N", 1, 7])],
                       [("y", F16, ["N", 5, 7]), ("z", BOOL, ["N", 5, 7])])
    engine = twinfer.load(model, device="cpu")
    for n in (1, 3):
        feeds = {"x": rng.standard_normal((n, 5, 1)).astype(F32), "b": rng.standard_normal((1, 7)).astype(F32),
                 "c": rng.random((n, 1, 7)) < 0.5}
        out = engine.run(feeds)
        exp = run_ort(model, feeds)
        assert_close(out["y"].numpy(), exp[0], rtol=0, atol=0)
        assert_close(out["z"].numpy(), exp[1])


# ---------------------------------------------------------------------------
# Errors: a twinfer.Error that names the node, never a crash.
# ---------------------------------------------------------------------------
def expect_error(model, feeds, node_name, *words):
    import twinfer

    with pytest.raises(twinfer.Error) as e:
        twinfer_run(model, feeds)
    msg = str(e.value)
    assert node_name in msg, msg
    for w in words:
        assert w in msg, msg


def test_errors_wrong_dtype():
    x = np.array([True, False])
    for op in ("Sqrt", "Exp", "Sigmoid", "Neg", "Floor"):
        model, feeds = build(op, [("x", x)], {}, [BOOL], 17)
        expect_error(model, feeds, f"the_{op.lower()}", "bool")
    i = np.arange(6, dtype=np.int32)
    model, feeds = build("Not", [("x", i)], {}, [i.dtype], 17)
    expect_error(model, feeds, "the_not", "int32")
    f = np.ones(4, F32)
    model, feeds = build("BitShift", [("a", f), ("b", f)], {"direction": "LEFT"}, [F32], 17)
    expect_error(model, feeds, "the_bitshift", "float32")
    model, feeds = build("And", [("a", f), ("b", f)], {}, [BOOL], 17)
    expect_error(model, feeds, "the_and", "float32")


def test_errors_bad_attribute_and_shapes():
    f = np.ones((3, 4), F32)
    model, feeds = build("Gelu", [("x", f)], {"approximate": "fast"}, [F32], 20)
    expect_error(model, feeds, "the_gelu", "approximate")
    model, feeds = build("BitShift", [("a", f.astype(np.uint8)), ("b", f.astype(np.uint8))],
                         {"direction": "UP"}, [np.uint8], 17)
    expect_error(model, feeds, "the_bitshift", "direction")
    model, feeds = build("Add", [("a", f), ("b", np.ones((5,), F32))], {}, [F32], 17)
    expect_error(model, feeds, "the_add")
    model, feeds = build("Where", [("c", np.ones((2, 1), bool)), ("a", f), ("b", f)], {}, [F32], 17)
    expect_error(model, feeds, "the_where")
