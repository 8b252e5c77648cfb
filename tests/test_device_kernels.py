"""The device's elementwise kernels (unary math, activations, binary
arithmetic with broadcasting, comparisons, Where, Cast) against twinfer's
CPU backend, on fresh random data with odd sizes and broadcasts.

On CUDA these are the CUDA kernels (csrc/backends/cuda); on the simulated
device with sim_coverage="cuda" the same nodes are placed as CUDA would place
them, so the test checks placement (every node on the device) in CI and the
kernels themselves where a GPU is present."""

import functools
import time

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import twinfer
from conftest import SIM_AS_CUDA
from onnx_helpers import run_ort

DEVICES = [SIM_AS_CUDA, pytest.param("cuda", marks=pytest.mark.cuda)]

SHAPES = [(1,), (7,), (33, 5), (2, 3, 1023), (4, 1, 9, 2)]

UNARY_FLOAT = ["Abs", "Neg", "Sign", "Reciprocal", "Floor", "Ceil", "Round", "Exp", "Log", "Sqrt", "Sin", "Cos",
               "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Tanh", "Erf", "Sigmoid",
               "Softplus", "Softsign", "Relu", "LeakyRelu", "Elu", "Selu", "Celu", "ThresholdedRelu", "HardSigmoid",
               "HardSwish", "Mish", "Swish", "Gelu", "IsNaN"]
BINARY = ["Add", "Sub", "Mul", "Div", "Pow", "PRelu", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]

NP = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16, TensorProto.DOUBLE: np.float64,
      TensorProto.INT32: np.int32, TensorProto.INT64: np.int64, TensorProto.INT8: np.int8,
      TensorProto.UINT8: np.uint8, TensorProto.BOOL: np.bool_}


def _model(node, inputs, outputs):
    g = helper.make_graph([node], "k", inputs, outputs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    m.ir_version = 10
    return m


def _vi(name, t, shape):
    return helper.make_tensor_value_info(name, t, list(shape))


def _inputs_for(op, shape, rng, dtype):
    x = rng.standard_normal(shape) * 2
    if op in ("Log", "Sqrt", "Acosh"):
        x = np.abs(x) + (1.0 if op == "Acosh" else 0.01)
    if op in ("Asin", "Acos", "Atanh"):
        x = np.clip(x / 3, -0.95, 0.95)
    if op == "IsNaN":
        x.flat[:: max(1, x.size // 3)] = np.nan
    return x.astype(dtype)


def _run_both(m, feeds, device):
    cpu = twinfer.load(m, device="cpu").run(feeds)
    dev_engine = twinfer.load(m, device=device, sim_coverage="cuda", allow_cpu_fallback=False)
    got = dev_engine.run(feeds)
    rows = dev_engine.kernel_report({k: v.shape for k, v in feeds.items()})
    assert all(r.backend in (device, "copy") for r in rows), rows  # the op ran on the device
    return {k: v.numpy() for k, v in cpu.items()}, {k: v.numpy() for k, v in got.items()}


def _assert_same(got, want, dtype):
    assert got.shape == want.shape and got.dtype == want.dtype
    if np.issubdtype(want.dtype, np.floating):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        tol = 2e-3 if dtype == np.float16 else 2e-6
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", UNARY_FLOAT)
def test_unary(device, op, rng):
    for t in (TensorProto.FLOAT, TensorProto.FLOAT16):
        if op == "IsNaN":
            out_t = TensorProto.BOOL
        else:
            out_t = t
        shape = SHAPES[rng.integers(len(SHAPES))]
        m = _model(helper.make_node(op, ["x"], ["y"]), [_vi("x", t, shape)], [_vi("y", out_t, shape)])
        x = _inputs_for(op, shape, rng, NP[t])
        want, got = _run_both(m, {"x": x}, device)
        _assert_same(got["y"], want["y"], NP[t])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", BINARY)
@pytest.mark.parametrize("pattern", ["same", "row", "column", "scalar", "both"])
def test_binary_broadcasting(device, op, pattern, rng):
    a_shape = (3, 1, 7, 33) if pattern == "both" else (3, 5, 7, 33)
    b_shape = {"same": (3, 5, 7, 33), "row": (33,), "column": (5, 7, 1), "scalar": (), "both": (5, 1, 33)}[pattern]
    if op == "PRelu" and pattern == "both":
        pytest.skip("PRelu broadcasts the slope one way only")
    out_shape = np.broadcast_shapes(a_shape, b_shape)
    types = [TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT32, TensorProto.INT64]
    if op in ("Pow", "PRelu"):
        types = [TensorProto.FLOAT]
    for t in types:
        out_t = TensorProto.BOOL if op in ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual") else t
        m = _model(helper.make_node(op, ["a", "b"], ["y"]), [_vi("a", t, a_shape), _vi("b", t, b_shape)],
                   [_vi("y", out_t, out_shape)])
        a = rng.standard_normal(a_shape) * 3
        b = rng.standard_normal(b_shape) * 3
        if op == "Div":
            b = np.where(np.abs(b) < 0.5, 1.5, b)
        if op == "Pow":
            a = np.abs(a) + 0.1
        if np.issubdtype(NP[t], np.integer) or out_t == TensorProto.BOOL:
            a, b = np.round(a), np.round(b)  # small integers: comparisons see many ties
            if op == "Div":
                b = np.where(b == 0, 3, b)
        want, got = _run_both(m, {"a": a.astype(NP[t]), "b": b.astype(NP[t])}, device)
        _assert_same(got["y"], want["y"], NP[t])


@pytest.mark.parametrize("device", ["cpu", SIM_AS_CUDA, pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_prelu_before_opset_7_has_a_slope_per_channel(device, precision, rng):
    """Opset 6 PRelu with a [C] slope on [N, C, ...] (PyTorch's old
    per-channel export): one slope per channel, also where the last dim is C
    too (numpy broadcasting would read the slope along it), and also inside
    an elementwise chain (the Relu after it), against NumPy."""
    x_shape, c = (2, 3, 5, 3), 3
    x = rng.standard_normal(x_shape).astype(np.float32)
    slope = rng.standard_normal(c).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("PRelu", ["x", "slope"], ["p"]), helper.make_node("Neg", ["p"], ["n"]),
         helper.make_node("Relu", ["n"], ["y"])], "legacy_prelu",
        [_vi("x", TensorProto.FLOAT, x_shape)], [_vi("y", TensorProto.FLOAT, x_shape)],
        [numpy_helper.from_array(slope, "slope")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 6)])
    m.ir_version = 3
    per_channel = slope.reshape(c, 1, 1)
    want = np.maximum(-np.where(x < 0, x * per_channel, x), 0)
    kw = {} if device == "cpu" else dict(sim_coverage="cuda", allow_cpu_fallback=False, precision=precision)
    got = twinfer.load(m, device=device, **kw).run({"x": x})["y"]
    tol = 1e-6 if precision == "fp32" or device == "cpu" else 2e-3
    np.testing.assert_allclose(np.asarray(got, np.float32), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("device", DEVICES)
def test_where_every_width(device, rng):
    shape_c, shape_x, shape_y = (4, 1, 33), (1, 6, 33), (33,)
    out = np.broadcast_shapes(shape_c, shape_x, shape_y)
    for t in (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT64, TensorProto.UINT8, TensorProto.BOOL):
        m = _model(helper.make_node("Where", ["c", "x", "y"], ["z"]),
                   [_vi("c", TensorProto.BOOL, shape_c), _vi("x", t, shape_x), _vi("y", t, shape_y)],
                   [_vi("z", t, out)])
        feeds = {"c": rng.random(shape_c) < 0.5, "x": (rng.standard_normal(shape_x) * 9).astype(NP[t]),
                 "y": (rng.standard_normal(shape_y) * 9).astype(NP[t])}
        want, got = _run_both(m, feeds, device)
        _assert_same(got["z"], want["z"], NP[t])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["Max", "Min", "Sum", "Mean"])
@pytest.mark.parametrize("shapes", [[(4, 1, 33), (33,), (6, 1)], [(5, 7)] * 3, [(3, 5)]], ids=["broadcast", "same", "one"])
def test_variadic_inputs(device, op, shapes, rng):
    # Broadcast: the first pair broadcasts to less than the output ([4, 1, 33]
    # with [33]); the third input widens it. Same: every operand flat, 35
    # elements (not a whole number of packs). One: the input itself.
    # NaN propagates through Max/Min.
    out = np.broadcast_shapes(*shapes)
    ref = {"Max": lambda xs: functools.reduce(np.maximum, xs), "Min": lambda xs: functools.reduce(np.minimum, xs),
           "Sum": lambda xs: functools.reduce(np.add, xs), "Mean": lambda xs: functools.reduce(np.add, xs) / len(xs)}[op]
    types = [TensorProto.FLOAT, TensorProto.FLOAT16] + ([TensorProto.INT32, TensorProto.INT64] if op in ("Max", "Min") else [])
    for t in types:
        names = list("abc"[: len(shapes)])
        m = _model(helper.make_node(op, names, ["y"]), [_vi(n, t, s) for n, s in zip(names, shapes)],
                   [_vi("y", t, out)])
        xs = [(rng.standard_normal(s) * 9).astype(NP[t]) for s in shapes]
        if t == TensorProto.FLOAT:
            xs[0].flat[::17] = np.nan
        _, got = _run_both(m, dict(zip(names, xs)), device)
        want = ref([x.astype(np.float64) for x in xs]).astype(NP[t])
        _assert_same(got["y"], want, NP[t])


CODED = [TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2, TensorProto.FLOAT8E5M2FNUZ,
         TensorProto.FLOAT8E8M0, TensorProto.FLOAT4E2M1, TensorProto.INT4, TensorProto.UINT4, TensorProto.INT2,
         TensorProto.UINT2]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("coded", CODED, ids=[TensorProto.DataType.Name(t) for t in CODED])
def test_cast_through_one_byte_coded_types(device, coded, rng):
    # float32 (with NaN, inf, out-of-range, ties, negatives) -> coded (saturate
    # on and off) -> float32 / int32 / float16 / another coded type -> float32.
    shape = (3, 37)
    x = (rng.standard_normal(shape) * 40).astype(np.float32)
    x.flat[:8] = [np.nan, np.inf, -np.inf, 1e6, -1e6, 0.5, -2.5, 3.0]
    other = TensorProto.INT4 if coded != TensorProto.INT4 else TensorProto.FLOAT8E5M2
    for saturate in (1, 0):
        sat = {"saturate": saturate} if coded in CODED[:4] else {}
        nodes = [helper.make_node("Cast", ["x"], ["c"], to=coded, **sat),
                 helper.make_node("Cast", ["c"], ["f"], to=TensorProto.FLOAT),
                 helper.make_node("Cast", ["c"], ["i"], to=TensorProto.INT32),
                 helper.make_node("Cast", ["c"], ["h"], to=TensorProto.FLOAT16),
                 helper.make_node("Cast", ["c"], ["o"], to=other),
                 helper.make_node("Cast", ["o"], ["of"], to=TensorProto.FLOAT),
                 helper.make_node("Cast", ["x"], ["xi"], to=TensorProto.INT16),
                 helper.make_node("Cast", ["xi"], ["ci"], to=coded),
                 helper.make_node("Cast", ["ci"], ["cif"], to=TensorProto.FLOAT)]
        outs = [_vi("f", TensorProto.FLOAT, shape), _vi("i", TensorProto.INT32, shape),
                _vi("h", TensorProto.FLOAT16, shape), _vi("of", TensorProto.FLOAT, shape),
                _vi("cif", TensorProto.FLOAT, shape)]
        m = _model(nodes[0], [_vi("x", TensorProto.FLOAT, shape)], outs)
        m.graph.node.extend(nodes[1:])
        m.opset_import[0].version = 25 if coded in (TensorProto.INT2, TensorProto.UINT2) else 23
        with np.errstate(invalid="ignore", over="ignore"):
            want, got = _run_both(m, {"x": x}, device)
        for k in want:
            np.testing.assert_array_equal(got[k], want[k], err_msg=f"{k} saturate={saturate}")


@pytest.mark.parametrize("device", DEVICES)
def test_trilu_with_k_given_at_run_time(device, rng):
    for t in (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT64, TensorProto.UINT8):
        for upper in (0, 1):
            x = (rng.standard_normal((2, 3, 5, 7)) * 9).astype(NP[t])
            m = _model(helper.make_node("Trilu", ["x", "k"], ["y"], upper=upper),
                       [_vi("x", t, x.shape), _vi("k", TensorProto.INT64, ())], [_vi("y", t, x.shape)])
            for k in (-9, -2, 0, 3, 40):
                _, got = _run_both(m, {"x": x, "k": np.array(k, np.int64)}, device)
                want = np.triu(x, k) if upper else np.tril(x, k)
                np.testing.assert_array_equal(got["y"], want)


@pytest.mark.parametrize("device", DEVICES)
def test_clip_bounds_given_at_run_time(device, rng):
    x = (rng.standard_normal((4, 33)) * 3).astype(np.float32)
    x.flat[0] = np.nan
    for names, lo, hi in ((["x", "lo", "hi"], -1.25, 0.5), (["x", "", "hi"], None, 0.75), (["x", "lo"], -0.5, None),
                          (["x", "lo", "hi"], 1.0, -1.0)):  # min > max: max everywhere
        ins = [_vi("x", TensorProto.FLOAT, x.shape)] + [_vi(n, TensorProto.FLOAT, ()) for n in names[1:] if n]
        m = _model(helper.make_node("Clip", names, ["y"]), ins, [_vi("y", TensorProto.FLOAT, x.shape)])
        feeds = {"x": x}
        if lo is not None:
            feeds["lo"] = np.array(lo, np.float32)
        if hi is not None:
            feeds["hi"] = np.array(hi, np.float32)
        _, got = _run_both(m, feeds, device)
        want = x.copy()
        if lo is not None:
            want = np.where(want < lo, np.float32(lo), want)
        if hi is not None:
            want = np.where(want > hi, np.float32(hi), want)
        np.testing.assert_array_equal(got["y"], want)


@pytest.mark.parametrize("device", DEVICES)
def test_bitcast_keeps_the_bytes(device, rng):
    x = rng.standard_normal((5, 9)).astype(np.float32)
    m = _model(helper.make_node("BitCast", ["x"], ["y"], to=TensorProto.INT32), [_vi("x", TensorProto.FLOAT, x.shape)],
               [_vi("y", TensorProto.INT32, x.shape)])
    m.opset_import[0].version = 26
    _, got = _run_both(m, {"x": x}, device)
    np.testing.assert_array_equal(got["y"], x.view(np.int32))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("t", [TensorProto.INT16, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64])
def test_the_other_integer_widths(device, t, rng):
    npt = helper.tensor_dtype_to_np_dtype(t)
    a = rng.integers(0, 120, (3, 1, 17)).astype(npt)
    b = rng.integers(1, 9, (5, 17)).astype(npt)
    nodes = [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Mul", ["s", "b"], ["p"]),
             helper.make_node("Mod", ["p", "b"], ["r"]), helper.make_node("Max", ["r", "a"], ["y"]),
             helper.make_node("Less", ["a", "b"], ["lt"]), helper.make_node("BitShift", ["a", "b"], ["sh"],
                                                                            direction="LEFT")]
    m = _model(nodes[0], [_vi("a", t, a.shape), _vi("b", t, b.shape)],
               [_vi("y", t, (3, 5, 17)), _vi("lt", TensorProto.BOOL, (3, 5, 17)), _vi("sh", t, (3, 5, 17))])
    m.graph.node.extend(nodes[1:])
    _, got = _run_both(m, {"a": a, "b": b}, device)
    p = (a + b) * b  # wraps as the dtype does
    np.testing.assert_array_equal(got["y"], np.maximum(p % b, a))
    np.testing.assert_array_equal(got["lt"], a < b)
    np.testing.assert_array_equal(got["sh"], (a << b).astype(npt))


@pytest.mark.parametrize("device", DEVICES)
def test_cast_between_types(device, rng):
    types = [TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.INT32, TensorProto.INT64,
             TensorProto.INT8, TensorProto.UINT8, TensorProto.BOOL]
    shape = (5, 77)
    x = rng.standard_normal(shape) * 200
    x.flat[:5] = [np.nan, np.inf, -np.inf, 1e10, -0.5]
    for src in types:
        for dst in types:
            m = _model(helper.make_node("Cast", ["x"], ["y"], to=dst), [_vi("x", src, shape)], [_vi("y", dst, shape)])
            with np.errstate(invalid="ignore", over="ignore"):
                xs = x.astype(NP[src]) if np.issubdtype(NP[src], np.floating) else \
                    np.nan_to_num(x, posinf=100, neginf=-100).astype(np.int64).astype(NP[src])
            want, got = _run_both(m, {"x": xs}, device)
            _assert_same(got["y"], want["y"], NP[dst])


@pytest.mark.cuda
def test_more_than_two_to_the_31_elements(rng):
    # Offsets past 2^31 must stay exact (the index math is 64-bit).
    n = (1 << 31) + 3
    m = _model(helper.make_node("Add", ["a", "b"], ["y"]), [_vi("a", TensorProto.UINT8, (n,)),
                                                           _vi("b", TensorProto.UINT8, (1,))],
               [_vi("y", TensorProto.UINT8, (n,))])
    a = rng.integers(0, 200, n, dtype=np.uint8)
    e = twinfer.load(m, device="cuda", allow_cpu_fallback=False)
    y = e.run({"a": a, "b": np.array([7], np.uint8)})["y"].numpy()
    assert y[-1] == np.uint8(a[-1] + 7) and y[(1 << 31) + 1] == np.uint8(a[(1 << 31) + 1] + 7)
    np.testing.assert_array_equal(y[::4099], (a[::4099] + 7).astype(np.uint8))


def _rel(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shapes", [((7,), (7, 5)), ((3, 7), (7,)), ((2, 3, 5, 7), (7, 9)), ((2, 3, 5, 7), (2, 3, 7, 9)),
                                    ((1, 5, 7), (4, 7, 9)), ((33, 65), (65, 17))])
def test_matmul(device, shapes, rng):
    a_shape, b_shape = shapes
    y_shape = np.matmul(np.zeros(a_shape), np.zeros(b_shape)).shape
    for t, tol in ((TensorProto.FLOAT, 1e-5), (TensorProto.FLOAT16, 1e-2)):
        m = _model(helper.make_node("MatMul", ["a", "b"], ["y"]), [_vi("a", t, a_shape), _vi("b", t, b_shape)],
                   [_vi("y", t, y_shape)])
        feeds = {"a": rng.standard_normal(a_shape).astype(NP[t]), "b": rng.standard_normal(b_shape).astype(NP[t])}
        want, got = _run_both(m, feeds, device)
        assert got["y"].shape == want["y"].shape and _rel(got["y"], want["y"]) < tol


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("t", [TensorProto.FLOAT, TensorProto.FLOAT16])
def test_matmul_batches_that_broadcast_both_ways(device, t, rng):
    # Neither operand's batch dims are all 1 nor the output's: the CUDA
    # MatMul expands them into scratch (one matrix per output batch) and
    # strides through those; against NumPy and the CPU backend.
    npt = NP[t]
    for a_shape, b_shape in (((2, 1, 5, 7), (1, 3, 7, 4)), ((3, 1, 2, 1, 6, 9), (1, 4, 1, 5, 9, 3)),
                             ((4, 1, 3, 8), (5, 8, 2)), ((2, 6, 1, 3, 5), (6, 4, 5, 3))):
        y_shape = np.broadcast_shapes(a_shape[:-2], b_shape[:-2]) + (a_shape[-2], b_shape[-1])
        m = _model(helper.make_node("MatMul", ["a", "b"], ["y"], name="mm"), [_vi("a", t, a_shape), _vi("b", t, b_shape)],
                   [_vi("y", t, y_shape)])
        a = rng.standard_normal(a_shape).astype(npt)
        b = rng.standard_normal(b_shape).astype(npt)
        want_cpu, got = _run_both(m, {"a": a, "b": b}, device)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        tol = 2e-2 if t == TensorProto.FLOAT16 else 1e-5
        for r in (got["y"], want_cpu["y"]):
            assert r.shape == ref.shape and r.dtype == npt
            assert _rel(r.astype(np.float64), ref) < tol, (a_shape, b_shape)


def test_matmul_batch_expansion_index_math():
    # ops/nn/batch_broadcast.h, the index the CUDA expansion reads, against
    # NumPy's own broadcasting of batch indices.
    for src, y in (((2, 1), (2, 3)), ((1, 3), (2, 3)), ((3, 1, 2, 1), (3, 4, 2, 5)), ((1, 1, 7), (2, 3, 7)),
                   ((1,), (4,)), ((5, 1, 1), (5, 6, 2))):
        want = np.broadcast_to(np.arange(int(np.prod(src))).reshape(src), y).ravel()
        assert twinfer._core._test_source_batch(list(src), list(y)) == want.tolist(), (src, y)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("act", ["", "Relu", "Gelu", "Sigmoid", "Tanh"])
def test_fused_matmul_bias_activation(device, act, rng):
    K, N = 40, 24
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "bias"], ["z" if act else "y"])]
    if act:
        nodes.append(helper.make_node(act, ["z"], ["y"]))
    w = helper.make_tensor("w", TensorProto.FLOAT, (K, N), rng.standard_normal((K, N)).astype(np.float32).ravel())
    bias = helper.make_tensor("bias", TensorProto.FLOAT, (N,), rng.standard_normal(N).astype(np.float32))
    g = helper.make_graph(nodes, "fused", [_vi("x", TensorProto.FLOAT, ("B", 9, K))], [_vi("y", TensorProto.FLOAT, ("B", 9, N))],
                          [w, bias])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    m.ir_version = 10
    x = rng.standard_normal((3, 9, K)).astype(np.float32)
    want, got = _run_both(m, {"x": x}, device)
    assert _rel(got["y"], want["y"]) < 1e-5
    e = twinfer.load(m, device=device, sim_coverage="cuda")
    ops = [r.op for r in e.kernel_report({"x": (3, 9, K)})]
    assert "com.twinfer::MatMul" in ops, ops  # fused for the device too (it has the kernel)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("c_shape,beta", [(None, 1.0), ((11,), 1.0), ((11,), 0.5), ((6, 11), 2.0), ((6, 1), 1.0),
                                          ((1,), -1.0)])
def test_gemm(device, trans_a, trans_b, c_shape, beta, rng):
    M, K, N = 6, 13, 11
    a_shape = (K, M) if trans_a else (M, K)
    b_shape = (N, K) if trans_b else (K, N)
    inputs = [_vi("a", TensorProto.FLOAT, a_shape), _vi("b", TensorProto.FLOAT, b_shape)]
    feeds = {"a": rng.standard_normal(a_shape).astype(np.float32), "b": rng.standard_normal(b_shape).astype(np.float32)}
    names = ["a", "b"]
    if c_shape is not None:
        inputs.append(_vi("c", TensorProto.FLOAT, c_shape))
        feeds["c"] = rng.standard_normal(c_shape).astype(np.float32)
        names.append("c")
    node = helper.make_node("Gemm", names, ["y"], transA=trans_a, transB=trans_b, alpha=0.75, beta=beta)
    m = _model(node, inputs, [_vi("y", TensorProto.FLOAT, (M, N))])
    want, got = _run_both(m, feeds, device)
    ref = 0.75 * ((feeds["a"].T if trans_a else feeds["a"]) @ (feeds["b"].T if trans_b else feeds["b"]))
    if c_shape is not None:
        ref = ref + beta * feeds["c"]
    assert _rel(got["y"], ref) < 1e-5 and _rel(want["y"], ref) < 1e-5


def _check(device, node, inputs, outputs, feeds, tol=1e-5, opset=20, inits=()):
    g = helper.make_graph([node], "k", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    want, got = _run_both(m, feeds, device)
    for k in want:
        if np.issubdtype(want[k].dtype, np.floating):
            assert got[k].shape == want[k].shape and _rel(got[k], want[k]) <= tol, k
        else:
            np.testing.assert_array_equal(got[k], want[k])


@pytest.mark.parametrize("device", DEVICES)
def test_data_movement(device, rng):
    F = TensorProto.FLOAT
    x = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
    for perm in ([0, 2, 1, 3], [3, 2, 1, 0], [0, 2, 3, 1], [1, 0, 2, 3]):
        _check(device, helper.make_node("Transpose", ["x"], ["y"], perm=perm), [_vi("x", F, x.shape)],
               [_vi("y", F, [x.shape[p] for p in perm])], {"x": x})
    starts, ends, axes, steps = [1, -1, 0], [3, -6, 7], [1, 2, 3], [1, -2, 3]
    y_shape = x[:, 1:3, -1:-6:-2, 0:7:3].shape
    inits = [helper.make_tensor(n, TensorProto.INT64, [3], v) for n, v in
             (("s", starts), ("e", ends), ("a", axes), ("p", steps))]
    _check(device, helper.make_node("Slice", ["x", "s", "e", "a", "p"], ["y"]), [_vi("x", F, x.shape)],
           [_vi("y", F, y_shape)], {"x": x}, inits=inits)
    _check(device, helper.make_node("Expand", ["x", "shape"], ["y"]), [_vi("x", F, (3, 1, 7))], [_vi("y", F, (2, 3, 5, 7))],
           {"x": rng.standard_normal((3, 1, 7)).astype(np.float32)},
           inits=[helper.make_tensor("shape", TensorProto.INT64, [4], [2, 3, 5, 7])])
    _check(device, helper.make_node("Tile", ["x", "r"], ["y"]), [_vi("x", F, (3, 2))], [_vi("y", F, (6, 6))],
           {"x": rng.standard_normal((3, 2)).astype(np.float32)},
           inits=[helper.make_tensor("r", TensorProto.INT64, [2], [2, 3])])
    for axis in (0, 1, -1):
        shapes = [list(x.shape) for _ in range(3)]
        for k, s in enumerate(shapes):
            s[axis] += k
        ins = {f"i{k}": rng.standard_normal(s).astype(np.float32) for k, s in enumerate(shapes)}
        out = np.concatenate(list(ins.values()), axis=axis)
        _check(device, helper.make_node("Concat", list(ins), ["y"], axis=axis),
               [_vi(k, F, v.shape) for k, v in ins.items()], [_vi("y", F, out.shape)], ins)
        parts = np.split(out, [shapes[0][axis], shapes[0][axis] + shapes[1][axis]], axis=axis)
        _check(device, helper.make_node("Split", ["y", "sizes"], ["p0", "p1", "p2"], axis=axis), [_vi("y", F, out.shape)],
               [_vi(f"p{k}", F, p.shape) for k, p in enumerate(parts)], {"y": out},
               inits=[helper.make_tensor("sizes", TensorProto.INT64, [3], [s[axis] for s in shapes])])
    d = rng.standard_normal((2, 8, 3, 5)).astype(np.float32)
    _check(device, helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2, mode="CRD"), [_vi("x", F, d.shape)],
           [_vi("y", F, (2, 2, 6, 10))], {"x": d})


@pytest.mark.parametrize("device", DEVICES)
def test_copies_of_contiguous_runs(device, rng):
    # Transposes keeping the last axis (attention's [B, S, H, D] -> [B, H, S, D])
    # and slices of whole runs copy 16-, 8- or 4-byte units on CUDA: runs of
    # 32, 24 and 12 bytes, fp16 and float32, and a slice starting 8 bytes in.
    for shape, dt, npt in (((2, 5, 3, 8), TensorProto.FLOAT, np.float32), ((2, 5, 3, 6), TensorProto.FLOAT, np.float32),
                           ((3, 4, 5, 16), TensorProto.FLOAT16, np.float16), ((2, 3, 7, 6), TensorProto.FLOAT16, np.float16)):
        x = rng.standard_normal(shape).astype(npt)
        for perm in ([0, 2, 1, 3], [2, 0, 1, 3]):
            _check(device, helper.make_node("Transpose", ["x"], ["y"], perm=perm), [_vi("x", dt, x.shape)],
                   [_vi("y", dt, [x.shape[p] for p in perm])], {"x": x})
    x = rng.standard_normal((3, 4, 5, 12)).astype(np.float32)
    inits = [helper.make_tensor(n, TensorProto.INT64, [2], v) for n, v in (("s", [1, 2]), ("e", [3, 8]), ("a", [1, 3]))]
    F = TensorProto.FLOAT
    _check(device, helper.make_node("Slice", ["x", "s", "e", "a"], ["y"]), [_vi("x", F, x.shape)],
           [_vi("y", F, x[:, 1:3, :, 2:8].shape)], {"x": x}, inits=inits)


@pytest.mark.parametrize("device", DEVICES)
def test_gather_and_gather_nd(device, rng):
    F = TensorProto.FLOAT
    data = rng.standard_normal((5, 7, 3)).astype(np.float32)
    for axis in (0, 1, 2, -1):
        n = data.shape[axis]
        for it, npt in ((TensorProto.INT64, np.int64), (TensorProto.INT32, np.int32)):
            idx = rng.integers(-n, n, (4, 2)).astype(npt)
            out = np.take(data, np.where(idx < 0, idx + n, idx), axis=axis)
            _check(device, helper.make_node("Gather", ["d", "i"], ["y"], axis=axis),
                   [_vi("d", F, data.shape), _vi("i", it, idx.shape)], [_vi("y", F, out.shape)], {"d": data, "i": idx})
    ind = np.stack([rng.integers(0, 5, 6), rng.integers(-7, 7, 6)], axis=1).astype(np.int64).reshape(2, 3, 2)
    _check(device, helper.make_node("GatherND", ["d", "i"], ["y"]), [_vi("d", F, data.shape), _vi("i", TensorProto.INT64, ind.shape)],
           [_vi("y", F, (2, 3, 3))], {"d": data, "i": ind})
    # Rows copied as 16-, 8- and 4-byte units on CUDA: an fp16 embedding table
    # (rows of 24 values, 48 bytes), float rows of 8 (32 bytes) and of 6 (24).
    for shape, t, npt, axis in (((50, 24), TensorProto.FLOAT16, np.float16, 0), ((5, 7, 8), F, np.float32, 1),
                                ((9, 6), F, np.float32, 0), ((6, 5, 2), TensorProto.FLOAT16, np.float16, 1)):
        d = rng.standard_normal(shape).astype(npt)
        idx = rng.integers(-shape[axis], shape[axis], (3, 11)).astype(np.int64)
        out = np.take(d, np.where(idx < 0, idx + shape[axis], idx), axis=axis)
        _check(device, helper.make_node("Gather", ["d", "i"], ["y"], axis=axis),
               [_vi("d", t, d.shape), _vi("i", TensorProto.INT64, idx.shape)], [_vi("y", t, out.shape)], {"d": d, "i": idx})


@pytest.mark.cuda
def test_gather_index_out_of_range_is_an_error_and_the_engine_recovers(rng):
    g = helper.make_graph([helper.make_node("Gather", ["d", "i"], ["y"])], "g",
                          [_vi("d", TensorProto.FLOAT, (5, 3)), _vi("i", TensorProto.INT64, (2,))],
                          [_vi("y", TensorProto.FLOAT, (2, 3))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    e = twinfer.load(m, device="cuda", allow_cpu_fallback=False)
    d = rng.standard_normal((5, 3)).astype(np.float32)
    with pytest.raises(twinfer.InvalidArgumentError, match="out of range"):
        e.run({"d": d, "i": np.array([1, 9], np.int64)})
    np.testing.assert_array_equal(e.run({"d": d, "i": np.array([4, -1], np.int64)})["y"].numpy(), d[[4, -1]])
    # Two contexts: the error is raised by the one whose run caused it, even
    # when another context synchronises first.
    a, b = e.create_context(), e.create_context()
    bad = e.run({"d": d, "i": np.array([0, 7], np.int64)}, context=a, outputs="device")["y"]
    while not bad.ready:  # the bad Gather has finished (an event query checks no flag)
        time.sleep(0.001)
    np.testing.assert_array_equal(e.run({"d": d, "i": np.array([2, 3], np.int64)}, context=b)["y"].numpy(), d[[2, 3]])
    with pytest.raises(twinfer.InvalidArgumentError, match="out of range"):
        bad.numpy()  # reading the output of the run that failed raises its error, once
    a.synchronize()
    bad2 = e.run({"d": d, "i": np.array([0, -9], np.int64)}, context=a, outputs="device")["y"]
    with pytest.raises(twinfer.InvalidArgumentError, match="out of range"):
        a.synchronize()  # or the context's own wait
    del bad2
    np.testing.assert_array_equal(e.run({"d": d, "i": np.array([1], np.int64)[[0, 0]]}, context=a)["y"].numpy(),
                                  d[[1, 1]])


@pytest.mark.parametrize("device", DEVICES)
def test_rows_softmax_layernorm_reductions(device, rng):
    F = TensorProto.FLOAT
    # Rows of up to 1024 go a warp each (17, 197, 1023, 1), longer ones a block each (1500).
    for shape in ((3, 17), (2, 4, 1023), (5, 1), (3, 2, 197), (2, 1500)):
        x = (rng.standard_normal(shape) * 4).astype(np.float32)
        for op in ("Softmax", "LogSoftmax"):
            _check(device, helper.make_node(op, ["x"], ["y"], axis=-1), [_vi("x", F, shape)], [_vi("y", F, shape)], {"x": x})
        d = shape[-1]
        ln_inits = [helper.make_tensor("s", F, [d], rng.standard_normal(d).astype(np.float32)),
                    helper.make_tensor("b", F, [d], rng.standard_normal(d).astype(np.float32))]
        _check(device, helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1, epsilon=1e-5),
               [_vi("x", F, shape)], [_vi("y", F, shape)], {"x": x}, tol=1e-5, inits=ln_inits)
        for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL1", "ReduceL2", "ReduceSumSquare",
                   "ReduceLogSum", "ReduceLogSumExp", "ReduceProd"):
            xr = {"ReduceLogSum": np.abs(x) + 0.1, "ReduceProd": 1 + x / 300}.get(op, x).astype(np.float32)
            _check(device, helper.make_node(op, ["x", "ax"], ["y"], keepdims=1), [_vi("x", F, shape)],
                   [_vi("y", F, shape[:-1] + (1,))], {"x": xr},
                   inits=[helper.make_tensor("ax", TensorProto.INT64, [1], [-1])])
    x = rng.standard_normal((2, 5, 3, 7)).astype(np.float32)
    _check(device, helper.make_node("Softmax", ["x"], ["y"], axis=1), [_vi("x", F, x.shape)], [_vi("y", F, x.shape)],
           {"x": x}, opset=11)  # opset < 13: rows of everything from the axis on
    _check(device, helper.make_node("Softmax", ["x"], ["y"], axis=1), [_vi("x", F, x.shape)], [_vi("y", F, x.shape)],
           {"x": x})  # opset 13: along axis 1 alone, its elements 21 apart
    for op in ("GlobalAveragePool", "GlobalMaxPool"):
        _check(device, helper.make_node(op, ["x"], ["y"]), [_vi("x", F, x.shape)], [_vi("y", F, (2, 5, 1, 1))], {"x": x})


REDUCE_NP = {"ReduceSum": np.sum, "ReduceMean": np.mean, "ReduceMax": np.max, "ReduceMin": np.min,
             "ReduceL1": lambda x, axis, keepdims: np.sum(np.abs(x), axis=axis, keepdims=keepdims),
             "ReduceL2": lambda x, axis, keepdims: np.sqrt(np.sum(x * x, axis=axis, keepdims=keepdims)),
             "ReduceSumSquare": lambda x, axis, keepdims: np.sum(x * x, axis=axis, keepdims=keepdims),
             "ReduceLogSum": lambda x, axis, keepdims: np.log(np.sum(x, axis=axis, keepdims=keepdims)),
             "ReduceLogSumExp": lambda x, axis, keepdims: np.log(np.sum(np.exp(x), axis=axis, keepdims=keepdims)),
             "ReduceProd": np.prod}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("t", [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16])
@pytest.mark.parametrize("shape, axes", [((3, 5, 4, 7), (0, 2, 3)), ((2, 9, 5, 6), (0, 2)), ((2, 3, 1, 4, 5), (1, 4)),
                                         ((37, 3, 65), (1,)), ((4, 6), ())])
def test_reductions_over_any_axes_in_every_float_type(device, t, shape, axes, rng):
    # Reduced dims that are not one block go through a gathered copy (the
    # reduced dims innermost), double computes in double, and empty axes
    # with noop_with_empty_axes are a copy. Against NumPy in float64 and the
    # CPU backend; NaN in one row must reach its Max / Min. (A no-op
    # reduction still maps: SumSquare, L1, L2, LogSum run as rows of one.)
    npt = NP[t]
    for op, fn in REDUCE_NP.items():
        x = rng.standard_normal(shape) * 2
        if op == "ReduceLogSum":
            x = np.abs(x) + 0.1
        if op == "ReduceProd":
            x = 1 + x / 30
        x = x.astype(npt)
        if op in ("ReduceMax", "ReduceMin") and x.size:
            x.flat[x.size // 3] = np.nan
        for keepdims in (0, 1):
            noop = not axes
            node = helper.make_node(op, ["x", "ax"], ["y"], keepdims=keepdims, noop_with_empty_axes=int(noop))
            ax = helper.make_tensor("ax", TensorProto.INT64, [len(axes)], list(axes))
            g = helper.make_graph([node], "r", [_vi("x", t, shape)], [helper.make_tensor_value_info("y", t, None)], [ax])
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
            m.ir_version = 10
            want_cpu, got = _run_both(m, {"x": x}, device)
            # noop: each element a set of one, which the op still maps (|x|, x*x, log x).
            ref = (fn(x.astype(np.float64)[..., None], axis=-1, keepdims=False) if noop
                   else fn(x.astype(np.float64), axis=axes, keepdims=bool(keepdims)))
            tol = {TensorProto.FLOAT16: 3e-3, TensorProto.FLOAT: 2e-6, TensorProto.DOUBLE: 1e-12}[t]
            for r in (got["y"], want_cpu["y"]):
                assert r.dtype == npt and r.shape == ref.shape, (op, r.shape, ref.shape)
                np.testing.assert_array_equal(np.isnan(r), np.isnan(ref), err_msg=op)
                np.testing.assert_allclose(r.astype(np.float64), ref, rtol=tol, atol=tol, equal_nan=True, err_msg=op)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape, axes", [((3, 17), (1,)), ((4, 5, 6), (1,)), ((2, 3, 4, 5), (0, 3))])
def test_int32_reduce_sum_runs_on_the_device(device, shape, axes, rng):
    # onnxruntime's optimizer counts an attention mask's keys with an int32
    # ReduceSum; it had no CUDA kernel, so the mask chain went to the host.
    # Summed in double: exact. Against NumPy and the CPU backend.
    x = rng.integers(-1000, 1000, shape).astype(np.int32)
    for keepdims in (0, 1):
        node = helper.make_node("ReduceSum", ["x", "ax"], ["y"], keepdims=keepdims)
        ax = helper.make_tensor("ax", TensorProto.INT64, [len(axes)], list(axes))
        g = helper.make_graph([node], "r", [_vi("x", TensorProto.INT32, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, None)], [ax])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
        m.ir_version = 10
        want_cpu, got = _run_both(m, {"x": x}, device)
        ref = x.astype(np.int64).sum(axis=axes, keepdims=bool(keepdims)).astype(np.int32)
        _assert_same(got["y"], ref, np.int32)
        _assert_same(want_cpu["y"], ref, np.int32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape, axes", [((5, 7), (1,)), ((4, 6, 3), (1,)), ((3, 4, 5, 2), (0, 2)),
                                         ((2, 0, 3), (1,)), ((6, 9), ())])
def test_bool_reduce_max_and_min_are_any_and_all(device, shape, axes, rng):
    # Opset 20's bool ReduceMax / ReduceMin: any / all over a trailing axis,
    # a middle one, axes that are not one block (gathered first), an empty
    # axis (the identities: False, True) and all axes; rows all True, all
    # False and mixed. Against NumPy and the CPU backend.
    x = rng.random(shape) < 0.5
    if x.ndim == 2 and x.shape[0] > 2:
        x[0], x[1] = True, False
    for op, fn in (("ReduceMax", np.any), ("ReduceMin", np.all)):
        for keepdims in (0, 1):
            node = helper.make_node(op, ["x", "ax"] if axes else ["x"], ["y"], keepdims=keepdims)
            inits = [helper.make_tensor("ax", TensorProto.INT64, [len(axes)], list(axes))] if axes else []
            g = helper.make_graph([node], "r", [_vi("x", TensorProto.BOOL, shape)],
                                  [helper.make_tensor_value_info("y", TensorProto.BOOL, None)], inits)
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
            m.ir_version = 10
            want_cpu, got = _run_both(m, {"x": x}, device)
            ref = fn(x, axis=axes if axes else None, keepdims=bool(keepdims))
            for r in (got["y"], want_cpu["y"]):
                assert r.dtype == np.bool_ and r.shape == ref.shape, (op, r.shape, ref.shape)
                np.testing.assert_array_equal(r, ref, err_msg=f"{op} {shape} {axes}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("t", [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16])
def test_det(device, t, rng):
    # Batches of odd sizes, 1x1 to 9x9, a singular matrix (a repeated row)
    # and one whose first pivot is zero (a row swap flips the sign);
    # against NumPy in float64 and the CPU backend.
    npt = NP[t]
    for shape in ((2, 2), (3, 4, 5, 5), (7, 1, 1), (2, 9, 9)):
        x = rng.standard_normal(shape)
        if shape == (3, 4, 5, 5):
            x[0, 0, 3] = x[0, 0, 1]
            x[1, 2, 0, 0] = 0.0
        x = x.astype(npt)
        node = helper.make_node("Det", ["x"], ["y"])
        g = helper.make_graph([node], "d", [_vi("x", t, shape)], [helper.make_tensor_value_info("y", t, None)])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        m.ir_version = 10
        want_cpu, got = _run_both(m, {"x": x}, device)
        ref = np.linalg.det(x.astype(np.float64))
        tol = {TensorProto.FLOAT16: 2e-2, TensorProto.FLOAT: 1e-5, TensorProto.DOUBLE: 1e-12}[t]
        for r in (got["y"], want_cpu["y"]):
            assert r.dtype == npt and r.shape == ref.shape
            np.testing.assert_allclose(r.astype(np.float64), ref, rtol=tol, atol=tol * 10, err_msg=str(shape))
        np.testing.assert_array_equal(got["y"], want_cpu["y"])


@pytest.mark.parametrize("device", DEVICES)
def test_det_of_large_matrices_stays_on_the_cpu_with_a_reason(device, rng):
    # One thread per matrix is m^3 serial steps: above 64x64 the node runs
    # on the CPU and the report says why; the answer is NumPy's either way.
    x = (rng.standard_normal((2, 70, 70)) / 8 + np.eye(70)).astype(np.float32)
    node = helper.make_node("Det", ["x"], ["y"], name="det")
    g = helper.make_graph([node], "d", [_vi("x", TensorProto.FLOAT, x.shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 10
    e = twinfer.load(m, device=device, sim_coverage="cuda")
    (row,) = [r for r in e.kernel_report({"x": x.shape}) if r.node == "det"]
    assert row.backend == "cpu" and "70x70" in row.note, row
    np.testing.assert_allclose(e.run({"x": x})["y"].numpy(), np.linalg.det(x.astype(np.float64)), rtol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_max_unpool(device, rng):
    # Values sent where their indices point (distinct places in each plane,
    # as MaxPool's Indices), zeros elsewhere; the default output shape and a
    # larger output_shape that keeps the coordinates; float32 and int64.
    # Against NumPy and the CPU; an index out of range is an error.
    plane = 6 * 8
    pos = np.stack([rng.choice(plane, size=3 * 4, replace=False) for _ in range(6)]).reshape(2, 3, 3, 4)
    idx = (np.arange(6).reshape(2, 3, 1, 1) * plane + pos).astype(np.int64)
    for npt, t in ((np.float32, TensorProto.FLOAT), (np.int64, TensorProto.INT64)):
        x = (rng.standard_normal((2, 3, 3, 4)) * 100).astype(npt)
        want = np.zeros((2, 3, 6, 8), npt)
        want.reshape(-1)[idx.reshape(-1)] = x.reshape(-1)
        for out_shape in (None, [2, 3, 7, 9]):
            ins = ["x", "i"] + (["os"] if out_shape else [])
            inits = [helper.make_tensor("os", TensorProto.INT64, [4], out_shape)] if out_shape else []
            node = helper.make_node("MaxUnpool", ins, ["y"], kernel_shape=[2, 2], strides=[2, 2])
            g = helper.make_graph([node], "u", [_vi("x", t, x.shape), _vi("i", TensorProto.INT64, idx.shape)],
                                  [helper.make_tensor_value_info("y", t, None)], inits)
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])
            m.ir_version = 10
            want_cpu, got = _run_both(m, {"x": x, "i": idx}, device)
            ref = want
            if out_shape:
                ref = np.zeros(out_shape, npt)
                ref[:, :, :6, :8] = want
            np.testing.assert_array_equal(got["y"], ref)
            np.testing.assert_array_equal(want_cpu["y"], ref)
    e = twinfer.load(m, device=device, sim_coverage="cuda", allow_cpu_fallback=False)
    bad = idx.copy()
    bad[1, 2, 0, 3] = 2 * 3 * plane
    with pytest.raises(twinfer.InvalidArgumentError, match="out of range"):
        e.run({"x": x, "i": bad})


@pytest.mark.parametrize("device", DEVICES)
def test_max_unpool_repeated_indices_keep_the_last(device, rng):
    # Overlapping windows (kernel 3, stride 2) that share a maximum repeat an
    # index; with X from elsewhere (a decoder's values, not the pool's) two
    # different values go to one place, and the last in order wins, as in
    # onnxruntime and on the CPU. Every place repeated several times over.
    x = rng.standard_normal((2, 3, 6, 7)).astype(np.float32)
    idx = rng.integers(0, 13 * 15, size=x.shape).astype(np.int64)  # ~1.6 inputs per place, per plane
    idx += (np.arange(6).reshape(2, 3, 1, 1) * 13 * 15)
    want = np.zeros((2, 3, 13, 15), np.float32)
    flat = want.reshape(-1)
    for j, to in enumerate(idx.reshape(-1)):  # in order: the last write stays
        flat[to] = x.reshape(-1)[j]
    assert len(np.unique(idx)) < idx.size
    node = helper.make_node("MaxUnpool", ["x", "i"], ["y"], kernel_shape=[3, 3], strides=[2, 2])
    g = helper.make_graph([node], "u", [_vi("x", TensorProto.FLOAT, x.shape), _vi("i", TensorProto.INT64, idx.shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])
    m.ir_version = 10
    (ort_y,) = run_ort(m, {"x": x, "i": idx})
    np.testing.assert_array_equal(ort_y, want)
    want_cpu, got = _run_both(m, {"x": x, "i": idx}, device)
    np.testing.assert_array_equal(want_cpu["y"], want)
    np.testing.assert_array_equal(got["y"], want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pooling(device, op, rng):
    F = TensorProto.FLOAT
    x = rng.standard_normal((2, 3, 11, 13)).astype(np.float32)
    cases = [dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             dict(kernel_shape=[2, 3], strides=[1, 2], pads=[0, 1, 1, 0], ceil_mode=1),
             dict(kernel_shape=[3, 3], strides=[1, 1], dilations=[2, 1])]
    for attrs in cases:
        if op == "AveragePool":
            attrs = dict(attrs, count_include_pad=1)
        node = helper.make_node(op, ["x"], ["y"], **attrs)
        g = helper.make_graph([node], "p", [_vi("x", F, x.shape)], [helper.make_tensor_value_info("y", F, None)])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
        m.ir_version = 10
        want, got = _run_both(m, {"x": x}, device)
        assert _rel(got["y"], want["y"]) < 1e-6


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("storage_order", [0, 1])
@pytest.mark.parametrize("x_shape, attrs", [
    ((2, 3, 29), dict(kernel_shape=[4], strides=[3], pads=[1, 2])),                                   # 1-d
    ((2, 3, 11, 13), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 5, 10, 9), dict(kernel_shape=[2, 3], strides=[1, 2], dilations=[2, 1], ceil_mode=1)),
    ((2, 2, 5, 7, 6), dict(kernel_shape=[2, 3, 2], strides=[2, 1, 2], pads=[0, 1, 1, 1, 0, 0])),      # 3-d
])
def test_maxpool_indices(device, storage_order, x_shape, attrs, rng):
    # MaxPool's second output, the flat position of each window's maximum in
    # x (row-major, or the first spatial dim fastest with storage_order=1).
    # Reference: onnxruntime on float32; fp16 on the device against the
    # float32 positions of the same (fp16-exact) values.
    import onnxruntime as ort

    x32 = rng.permutation(np.prod(x_shape)).reshape(x_shape).astype(np.float32) / 8  # no ties, fp16-exact
    for t in (TensorProto.FLOAT, TensorProto.FLOAT16):
        node = helper.make_node("MaxPool", ["x"], ["y", "i"], storage_order=storage_order, **attrs)
        g = helper.make_graph([node], "p", [_vi("x", t, x_shape)],
                              [helper.make_tensor_value_info("y", t, None),
                               helper.make_tensor_value_info("i", TensorProto.INT64, None)])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 12)])
        m.ir_version = 8
        if t == TensorProto.FLOAT:
            want_y, want_i = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
                None, {"x": x32})
        x = x32.astype(NP[t])
        want, got = _run_both(m, {"x": x}, device)
        for r in (want, got):  # the CPU backend and the device, each against onnxruntime
            np.testing.assert_array_equal(r["i"], want_i)
            np.testing.assert_array_equal(r["y"], want_y.astype(NP[t]))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("t", [TensorProto.INT8, TensorProto.UINT8])
def test_maxpool_on_8_bit_integers(device, t, rng):
    # MaxPool takes int8 / uint8 since opset 12 (compared as floats on CUDA,
    # which hold every 8-bit value): against onnxruntime, padding, ceil_mode
    # and dilation included, the extremes of the type in the data.
    import onnxruntime as ort

    info = np.iinfo(NP[t])
    x = rng.integers(info.min, info.max + 1, size=(2, 3, 11, 9)).astype(NP[t])
    x[0, 0, :2, :2] = info.min
    x[1, 2, -1, -1] = info.max
    for attrs in (dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
                  dict(kernel_shape=[2, 3], strides=[1, 2], ceil_mode=1, dilations=[2, 1])):
        node = helper.make_node("MaxPool", ["x"], ["y"], **attrs)
        g = helper.make_graph([node], "p", [_vi("x", t, x.shape)], [helper.make_tensor_value_info("y", t, None)])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 12)])
        m.ir_version = 8
        want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        cpu, got = _run_both(m, {"x": x}, device)
        np.testing.assert_array_equal(cpu["y"], want)
        np.testing.assert_array_equal(got["y"], want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("group,dilation,stride", [(1, 1, 1), (1, 2, 2), (3, 1, 1), (6, 1, 2)])
def test_conv(device, group, dilation, stride, rng):
    F = TensorProto.FLOAT
    x = rng.standard_normal((2, 6, 13, 11)).astype(np.float32)
    w = helper.make_tensor("w", F, [12, 6 // group, 3, 3], rng.standard_normal((12, 6 // group, 3, 3)).astype(np.float32).ravel())
    b = helper.make_tensor("b", F, [12], rng.standard_normal(12).astype(np.float32))
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=group, dilations=[dilation] * 2, strides=[stride] * 2,
                            pads=[1, 1, 1, 1])
    g = helper.make_graph([node, helper.make_node("Relu", ["y"], ["z"])], "c", [_vi("x", F, x.shape)],
                          [helper.make_tensor_value_info("z", F, None)], [w, b])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    want, got = _run_both(m, {"x": x}, device)
    assert _rel(got["z"], want["z"]) < 1e-5


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("t", [TensorProto.FLOAT, TensorProto.FLOAT16])
@pytest.mark.parametrize("x_shape, w_shape, group, attrs", [
    ((2, 6, 29), (4, 6, 5), 1, dict(pads=[2, 2], strides=[3])),                            # 1-d
    ((2, 8, 13, 11), (8, 1, 3, 3), 8, dict(pads=[1, 1, 1, 1])),                          # depthwise
    ((2, 8, 13, 11), (16, 4, 3, 3), 2, dict(pads=[2, 2, 2, 2], dilations=[2, 2], strides=[2, 1])),
    ((1, 3, 5, 9, 7), (4, 3, 3, 3, 3), 1, dict(pads=[1] * 6, strides=[1, 2, 1])),           # 3-d
])
def test_conv_on_cudnns_graph_api_and_its_legacy_one(device, t, x_shape, w_shape, group, attrs, rng, monkeypatch):
    # conv.cc tries cuDNN's graph API first (its heuristics choose the engine)
    # and keeps the legacy descriptor API for what the graph API refuses;
    # TWINFER_CUDNN_CONV=legacy forces the latter. Both against the CPU.
    npt = NP[t]
    x = rng.standard_normal(x_shape).astype(npt)
    w = helper.make_tensor("w", t, list(w_shape), rng.standard_normal(w_shape).astype(npt).ravel())
    node = helper.make_node("Conv", ["x", "w"], ["y"], group=group, name="conv", **attrs)
    g = helper.make_graph([node], "c", [_vi("x", t, x.shape)], [helper.make_tensor_value_info("y", t, None)], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    for mode, name in (("graph", "cudnn graph conv"), ("legacy", "cudnn conv (algo")):
        monkeypatch.setenv("TWINFER_CUDNN_CONV", mode)
        want, got = _run_both(m, {"x": x}, device)
        tol = 2e-3 if t == TensorProto.FLOAT16 else 1e-5
        assert _rel(got["y"].astype(np.float64), want["y"].astype(np.float64)) < tol, mode
        if device == "cuda":
            e = twinfer.load(m, device="cuda", allow_cpu_fallback=False)
            (row,) = [r for r in e.kernel_report({"x": x.shape}) if r.node == "conv"]
            assert row.kernel.startswith(name), row


# float16 on the GPU only: the CPU (and so the simulated device) has float32 ConvTranspose kernels,
# so the float16 output is set against float32 on the CPU of the same (float16) values.
@pytest.mark.parametrize("device, t", [pytest.param(d.values[0], TensorProto.FLOAT, marks=d.marks) for d in DEVICES] +
                         [pytest.param("cuda", TensorProto.FLOAT16, marks=pytest.mark.cuda)])
@pytest.mark.parametrize("x_shape, w_shape, group, attrs", [
    ((2, 4, 7, 9), (4, 6, 3, 3), 1, dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])),  # decoder 2x
    ((2, 6, 5, 8), (6, 2, 3, 2), 3, dict(strides=[1, 2], dilations=[2, 1], pads=[0, 1, 2, 0])),
    ((2, 3, 11), (3, 5, 4), 1, dict(strides=[3], pads=[1, 2])),                                        # 1-d
    ((1, 2, 3, 4, 5), (2, 3, 2, 2, 2), 1, dict(strides=[2, 2, 2])),                                   # 3-d
])
def test_conv_transpose(device, t, x_shape, w_shape, group, attrs, rng):
    # cuDNN's data gradient of the convolution ConvTranspose undoes
    # (conv_transpose.cc), with a bias, against the CPU's oneDNN / reference kernels.
    npt = NP[t]
    x = rng.standard_normal(x_shape).astype(npt)
    m_out = w_shape[1] * group
    w, b = rng.standard_normal(w_shape).astype(npt), rng.standard_normal(m_out).astype(npt)

    def model(tt, nt):
        inits = [helper.make_tensor("w", tt, list(w_shape), w.astype(nt).ravel()),
                 helper.make_tensor("b", tt, [m_out], b.astype(nt))]
        node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], group=group, name="deconv", **attrs)
        g = helper.make_graph([node], "d", [_vi("x", tt, x.shape)], [helper.make_tensor_value_info("y", tt, None)], inits)
        mm = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        mm.ir_version = 10
        return mm

    m = model(t, npt)
    if t == TensorProto.FLOAT:
        want, got = _run_both(m, {"x": x}, device)
        assert _rel(got["y"], want["y"]) < 1e-5
    else:
        want = twinfer.load(model(TensorProto.FLOAT, np.float32), device="cpu").run({"x": x.astype(np.float32)})["y"].numpy()
        got = twinfer.load(m, device=device, allow_cpu_fallback=False).run({"x": x})["y"].numpy()
        assert got.dtype == np.float16 and _rel(got, want) < 2e-3
    if device == "cuda":
        e = twinfer.load(m, device="cuda", allow_cpu_fallback=False)
        (row,) = [r for r in e.kernel_report({"x": x.shape}) if r.node == "deconv"]
        assert row.kernel.startswith("cudnn graph conv transpose"), row


@pytest.mark.parametrize("device", DEVICES)
def test_conv_with_asymmetric_pads_runs_on_the_device(device, rng):
    # cuDNN takes one pad per dim: the CUDA Conv copies x with the difference
    # padded in (backends/cuda/conv_input_pad.h). It ran on the CPU before.
    F = TensorProto.FLOAT
    w = helper.make_tensor("w", F, [4, 3, 2, 2], rng.standard_normal(48).astype(np.float32))
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[0, 0, 1, 1], name="conv")
    g = helper.make_graph([node], "c", [_vi("x", F, (1, 3, 8, 8))], [_vi("y", F, (1, 4, 8, 8))], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    want, got = _run_both(m, {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}, device)
    assert _rel(got["y"], want["y"]) < 1e-5


@pytest.mark.parametrize("device", DEVICES)
def test_clip_with_constant_bounds(device, rng):
    F = TensorProto.FLOAT
    x = (rng.standard_normal((4, 33)) * 5).astype(np.float32)
    inits = [helper.make_tensor("lo", F, [], [-1.5]), helper.make_tensor("hi", F, [], [2.0])]
    _check(device, helper.make_node("Clip", ["x", "lo", "hi"], ["y"]), [_vi("x", F, x.shape)], [_vi("y", F, x.shape)],
           {"x": x}, inits=inits)


@pytest.mark.parametrize("device", DEVICES)
def test_clip_before_opset_11_reads_its_attributes(device, rng):
    # Clip-6 bounds are attributes; the CUDA kernel read only inputs, so it
    # clipped at +-inf (and so did fp16's saturating Clip in such models).
    F = TensorProto.FLOAT
    x = (rng.standard_normal((4, 33)) * 5).astype(np.float32)
    node = helper.make_node("Clip", ["x"], ["y"], min=-1.5, max=2.0)
    _check(device, node, [_vi("x", F, x.shape)], [_vi("y", F, x.shape)], {"x": x}, opset=6)
    g = helper.make_graph([node], "k", [_vi("x", F, x.shape)], [_vi("y", F, x.shape)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 6)])
    m.ir_version = 10
    got = twinfer.load(m, device=device, sim_coverage="cuda", allow_cpu_fallback=False).run({"x": x})["y"].numpy()
    np.testing.assert_array_equal(got, np.clip(x, -1.5, 2.0))


@pytest.mark.parametrize("device", DEVICES)
def test_split_with_a_missing_output_keeps_its_share(device, rng):
    # Output 1 is omitted (""): outputs 0 and 2 are still the 1st and 3rd
    # chunks of the axis, as NumPy slices them.
    F = TensorProto.FLOAT
    x = rng.standard_normal((3, 9, 5)).astype(np.float32)
    inits = [numpy_helper.from_array(np.array([2, 3, 4], np.int64), "sizes")]
    node = helper.make_node("Split", ["x", "sizes"], ["a", "", "c"], axis=1)
    g = helper.make_graph([node], "k", [_vi("x", F, x.shape)], [_vi("a", F, (3, 2, 5)), _vi("c", F, (3, 4, 5))], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 10
    want, got = _run_both(m, {"x": x}, device)
    np.testing.assert_array_equal(got["a"], x[:, :2])
    np.testing.assert_array_equal(got["c"], x[:, 5:])
    np.testing.assert_array_equal(want["c"], x[:, 5:])


@pytest.mark.parametrize("device", DEVICES)
def test_clip_int64_with_one_bound(device, rng):
    # The missing bound is the type's own limit: int64's max is 2^63 - 1,
    # which a double cannot hold.
    I = TensorProto.INT64
    big = np.iinfo(np.int64)
    x = np.concatenate([rng.integers(-1000, 1000, 29), [big.max, big.max - 1, big.min, 2**53 + 1]]).astype(np.int64)
    for bounds, want in ((["x", "lo"], np.maximum(x, -7)), (["x", "", "hi"], np.minimum(x, 2**62 + 3))):
        inits = [numpy_helper.from_array(np.array(-7, np.int64), "lo"),
                 numpy_helper.from_array(np.array(2**62 + 3, np.int64), "hi")]
        g = helper.make_graph([helper.make_node("Clip", bounds, ["y"])], "k", [_vi("x", I, x.shape)],
                              [_vi("y", I, x.shape)], inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        m.ir_version = 10
        _, got = _run_both(m, {"x": x}, device)
        np.testing.assert_array_equal(got["y"], want)


@pytest.mark.parametrize("device", DEVICES)
def test_batchnorm_not_folded(device, rng):
    # After an Add there is no Conv to fold it into: the device runs it, per
    # channel, at an odd spatial size and a batch of 3.
    F = TensorProto.FLOAT
    x = rng.standard_normal((3, 5, 7, 9)).astype(np.float32)
    inits = [numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "scale"),
             numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "bias"),
             numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "mean"),
             numpy_helper.from_array(rng.uniform(0.5, 2.0, 5).astype(np.float32), "var")]
    nodes = [helper.make_node("Add", ["x", "x"], ["x2"]),
             helper.make_node("BatchNormalization", ["x2", "scale", "bias", "mean", "var"], ["y"], epsilon=1e-3)]
    g = helper.make_graph(nodes, "k", [_vi("x", F, x.shape)], [_vi("y", F, x.shape)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)])
    m.ir_version = 10
    want, got = _run_both(m, {"x": x}, device)
    s, b, mu, v = (numpy_helper.to_array(t).reshape(1, 5, 1, 1) for t in inits)
    np.testing.assert_allclose(got["y"], s * (2 * x - mu) / np.sqrt(v + 1e-3) + b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_argmax_argmin_ties_and_nan(device, op, rng):
    # Integer-valued floats give ties; a NaN is the extreme (NumPy's rule).
    F = TensorProto.FLOAT
    x = rng.integers(-3, 4, (4, 6, 5)).astype(np.float32)
    x[1, 2, 3] = np.nan
    for axis in (1, -1):
        for last in (0, 1):
            node = helper.make_node(op, ["x"], ["y"], axis=axis, keepdims=0, select_last_index=last)
            out_shape = tuple(d for k, d in enumerate(x.shape) if k != axis % 3)
            g = helper.make_graph([node], "k", [_vi("x", F, x.shape)], [_vi("y", TensorProto.INT64, out_shape)])
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
            m.ir_version = 10
            want, got = _run_both(m, {"x": x}, device)
            np.testing.assert_array_equal(got["y"], want["y"])
            if not last:  # NumPy takes the first index, NaN included
                ref = (np.argmax if op == "ArgMax" else np.argmin)(x, axis=axis)
                np.testing.assert_array_equal(got["y"], ref)


@pytest.mark.parametrize("device", DEVICES)
def test_cumsum_and_cumprod(device, rng):
    # The position ids of RoBERTa-style exports (an int64 CumSum of the mask
    # along the sequence), and float sums / products with exclusive and
    # reverse along a middle axis.
    I, F = TensorProto.INT64, TensorProto.FLOAT
    mask = (rng.random((3, 37)) < 0.8).astype(np.int64)
    g = helper.make_graph([helper.make_node("CumSum", ["m", "ax"], ["p"])], "k", [_vi("m", I, mask.shape)],
                          [_vi("p", I, mask.shape)], [numpy_helper.from_array(np.array(1, np.int64), "ax")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    m.ir_version = 10
    _, got = _run_both(m, {"m": mask}, device)
    np.testing.assert_array_equal(got["p"], np.cumsum(mask, axis=1))
    x = rng.uniform(0.5, 1.5, (2, 9, 5)).astype(np.float32)
    for op in ("CumSum", "CumProd"):
        for exclusive in (0, 1):
            for reverse in (0, 1):
                node = helper.make_node(op, ["x", "ax"], ["y"], exclusive=exclusive, reverse=reverse)
                g = helper.make_graph([node], "k", [_vi("x", F, x.shape)], [_vi("y", F, x.shape)],
                                      [numpy_helper.from_array(np.array(-2, np.int32), "ax")])
                m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 26 if op == "CumProd" else 14)])
                m.ir_version = 10
                want, got = _run_both(m, {"x": x}, device)
                xs = x[:, ::-1] if reverse else x
                ref = (np.cumsum if op == "CumSum" else np.cumprod)(xs.astype(np.float64), axis=1)
                if exclusive:
                    ref = np.concatenate([np.full_like(ref[:, :1], 0.0 if op == "CumSum" else 1.0), ref[:, :-1]], 1)
                ref = ref[:, ::-1] if reverse else ref
                np.testing.assert_allclose(got["y"], ref, rtol=1e-5, atol=1e-6)
                np.testing.assert_array_equal(got["y"], want["y"])  # the same order of operations


def _norm_ref(x, axes, eps):
    mean = x.mean(axis=axes, keepdims=True, dtype=np.float64)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(var + eps)


@pytest.mark.parametrize("device", DEVICES)
def test_instance_group_and_rms_normalization(device, rng):
    # Each against NumPy (float64 statistics) and the CPU kernel; odd sizes, a
    # plane longer than a block, GroupNormalization's per-channel (opset 21)
    # and per-group (opset 18) parameters, RMS over one and over two axes.
    F = TensorProto.FLOAT
    x = (rng.standard_normal((2, 6, 5, 67)) * 3 + 1).astype(np.float32)
    sc, bi = rng.standard_normal(6).astype(np.float32), rng.standard_normal(6).astype(np.float32)
    want = _norm_ref(x, (2, 3), 1e-5) * sc[:, None, None] + bi[:, None, None]
    inits = [helper.make_tensor("s", F, [6], sc), helper.make_tensor("b", F, [6], bi)]
    m = _norm_model(helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-5), x, inits, opset=17)
    ref, got = _run_both(m, {"x": x}, device)
    assert _rel(got["y"], want) < 1e-5 and _rel(got["y"], ref["y"]) < 1e-5
    g = x.reshape(2, 3, 2, 5, 67)
    want = _norm_ref(g, (2, 3, 4), 1e-3).reshape(x.shape) * sc[:, None, None] + bi[:, None, None]
    m = _norm_model(helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=3, epsilon=1e-3), x, inits,
               opset=21)
    ref, got = _run_both(m, {"x": x}, device)
    assert _rel(got["y"], want) < 1e-5 and _rel(got["y"], ref["y"]) < 1e-5
    sg, bg = sc[:3], bi[:3]  # opset 18: one scale and bias per group
    want = (_norm_ref(g, (2, 3, 4), 1e-3) * sg[:, None, None, None] + bg[:, None, None, None]).reshape(x.shape)
    m = _norm_model(helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=3, epsilon=1e-3), x,
               [helper.make_tensor("s", F, [3], sg), helper.make_tensor("b", F, [3], bg)], opset=18)
    ref, got = _run_both(m, {"x": x}, device)
    assert _rel(got["y"], want) < 1e-5 and _rel(got["y"], ref["y"]) < 1e-5
    r = rng.standard_normal((3, 4, 300)).astype(np.float32)
    for axis, shape in ((-1, [300]), (1, [4, 300])):
        w = rng.standard_normal(shape).astype(np.float32)
        axes = tuple(range(axis % 3, 3))
        want = r / np.sqrt((r.astype(np.float64) ** 2).mean(axis=axes, keepdims=True) + 1e-6) * w
        m = _norm_model(helper.make_node("RMSNormalization", ["x", "s"], ["y"], axis=axis, epsilon=1e-6), r,
                   [helper.make_tensor("s", F, shape, w)], opset=23)
        ref, got = _run_both(m, {"x": r}, device)
        assert _rel(got["y"], want) < 1e-5 and _rel(got["y"], ref["y"]) < 1e-5


def _norm_model(node, x, inits, opset):
    g = helper.make_graph([node], "n", [_vi("x", TensorProto.FLOAT, x.shape)], [_vi("y", TensorProto.FLOAT, x.shape)],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


@pytest.mark.parametrize("device", DEVICES)
def test_pad_modes(device, rng):
    # Against numpy.pad: every mode, a pad value from a tensor, negative pads
    # (crop first), the axes input (opset 18), int64 data, and opset 10's attributes.
    x = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
    I64 = TensorProto.INT64

    def run(node, inputs, inits, feeds, opset):
        out = node.output[0]
        g = helper.make_graph([node], "pad", inputs, [helper.make_tensor_value_info(out, inputs[0].type.tensor_type.elem_type, None)],
                              inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 10
        want, got = _run_both(m, feeds, device)
        return want[out], got[out]

    pads = [0, 1, 2, 3, 0, 2, 1, 2]  # begins for the 4 dims, then ends
    width = list(zip(pads[:4], pads[4:]))
    for mode, npmode in (("constant", "constant"), ("reflect", "reflect"), ("edge", "edge"), ("wrap", "wrap")):
        inits = [helper.make_tensor("p", I64, [8], pads)]
        ins = ["x", "p"]
        if mode == "constant":
            inits.append(helper.make_tensor("v", TensorProto.FLOAT, [], [2.5]))
            ins.append("v")
        want, got = run(helper.make_node("Pad", ins, ["y"], mode=mode), [_vi("x", TensorProto.FLOAT, x.shape)], inits,
                        {"x": x}, 19)
        kw = {"constant_values": 2.5} if mode == "constant" else {}
        ref = np.pad(x, width, mode=npmode, **kw)
        np.testing.assert_array_equal(got, ref)
        np.testing.assert_array_equal(got, want)
    # Negative pads crop, then pad; axes name two of the dims.
    inits = [helper.make_tensor("p", I64, [4], [-1, 2, 1, -3]), helper.make_tensor("a", I64, [2], [1, 3])]
    want, got = run(helper.make_node("Pad", ["x", "p", "", "a"], ["y"], mode="constant"),
                    [_vi("x", TensorProto.FLOAT, x.shape)], inits, {"x": x}, 18)
    ref = np.pad(x[:, 1:, :, :3], [(0, 0), (0, 1), (0, 0), (2, 0)])
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(got, want)
    xi = rng.integers(-1000, 1000, (3, 4)).astype(np.int64)
    want, got = run(helper.make_node("Pad", ["x", "p"], ["y"], mode="reflect"), [_vi("x", I64, xi.shape)],
                    [helper.make_tensor("p", I64, [4], [2, 1, 1, 3])], {"x": xi}, 13)
    np.testing.assert_array_equal(got, np.pad(xi, [(2, 1), (1, 3)], mode="reflect"))
    want, got = run(helper.make_node("Pad", ["x"], ["y"], mode="constant", pads=[0, 0, 1, 1, 0, 0, 1, 1], value=-1.0),
                    [_vi("x", TensorProto.FLOAT, x.shape)], [], {"x": x}, 10)
    np.testing.assert_array_equal(got, np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)], constant_values=-1.0))


@pytest.mark.parametrize("device", DEVICES)
def test_resize_modes(device, rng):
    # Against the ONNX reference evaluator: nearest (float and uint8, upsample
    # and downsample), linear with half_pixel and align_corners, cubic, and
    # tf_crop_and_resize extrapolating outside its roi.
    from onnx.reference import ReferenceEvaluator

    x = rng.standard_normal((2, 3, 7, 9)).astype(np.float32)
    xu = rng.integers(0, 255, (1, 2, 5, 6)).astype(np.uint8)
    cases = [
        (x, dict(mode="nearest"), [1, 1, 2.0, 2.0], None),
        (xu, dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"), [1, 1, 0.5, 1.5], None),
        (x, dict(mode="linear"), [1, 1, 1.5, 0.6], None),
        (x, dict(mode="linear", coordinate_transformation_mode="align_corners"), [1, 1, 2.0, 1.0], None),
        (x, dict(mode="cubic"), [1, 1, 1.3, 1.7], None),
        (x, dict(mode="linear", coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-7.0),
         [1, 1, 1.0, 1.5], [0, 0, -0.2, 0.1, 1, 1, 1.1, 0.8]),
    ]
    for data, attrs, scales, roi in cases:
        t = TensorProto.UINT8 if data.dtype == np.uint8 else TensorProto.FLOAT
        inits = [helper.make_tensor("scales", TensorProto.FLOAT, [4], scales)]
        roi_name = ""
        if roi is not None:
            inits.append(helper.make_tensor("roi", TensorProto.FLOAT, [8], roi))
            roi_name = "roi"
        node = helper.make_node("Resize", ["x", roi_name, "scales"], ["y"], **attrs)
        g = helper.make_graph([node], "r", [_vi("x", t, data.shape)], [helper.make_tensor_value_info("y", t, None)], inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
        m.ir_version = 10
        ref = ReferenceEvaluator(m).run(None, {"x": data})[0]
        want, got = _run_both(m, {"x": data}, device)
        if data.dtype == np.uint8:
            np.testing.assert_array_equal(got["y"], ref)
        else:
            np.testing.assert_allclose(got["y"], ref, rtol=1e-5, atol=1e-5, err_msg=str(attrs))
        np.testing.assert_allclose(got["y"].astype(np.float64), want["y"].astype(np.float64), rtol=1e-5, atol=1e-5)


def _topk_ref(x, k, axis, largest):
    """NumPy TopK in the spec's order: better value first (NaN the largest), ties by the lower index."""
    xm = np.moveaxis(x, axis, -1).astype(np.float64)
    key = np.where(np.isnan(xm), np.inf, xm)
    nan_first = np.isnan(xm)
    if largest:
        order = np.lexsort((np.broadcast_to(np.arange(xm.shape[-1]), xm.shape), -key, ~nan_first), axis=-1)
    else:
        order = np.lexsort((np.broadcast_to(np.arange(xm.shape[-1]), xm.shape), key, nan_first), axis=-1)
    idx = order[..., :k]
    vals = np.take_along_axis(np.moveaxis(x, axis, -1), idx, axis=-1)
    return np.moveaxis(vals, -1, axis), np.moveaxis(idx, -1, axis).astype(np.int64)


@pytest.mark.parametrize("device", DEVICES)
def test_topk(device, rng):
    # Ties (values drawn from a few levels), a NaN, largest and smallest, the
    # last and a middle axis, float / float16 / double / int64 / uint32 /
    # uint64 (with values past int64's range, which a signed comparison
    # would put last); against NumPy and the CPU.
    x = rng.integers(-4, 5, (3, 37, 6)).astype(np.float32)
    x[1, 7, 2] = np.nan
    big = (np.nan_to_num(x) + 4).astype(np.uint64)
    big[0, 3, 1], big[2, 30, 4], big[1, 0, 0] = 2**63 + 7, 2**64 - 1, 2**63 + 7
    for data, t in ((x, TensorProto.FLOAT), (x.astype(np.float16), TensorProto.FLOAT16),
                    (x.astype(np.float64), TensorProto.DOUBLE),
                    (np.nan_to_num(x).astype(np.int64), TensorProto.INT64),
                    ((np.nan_to_num(x) + 4).astype(np.uint32), TensorProto.UINT32), (big, TensorProto.UINT64)):
        for axis, k, largest in ((1, 5, 1), (1, 37, 0), (-1, 3, 1), (0, 2, 0)):
            out_shape = list(data.shape)
            out_shape[axis] = k
            node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest)
            g = helper.make_graph([node], "t", [_vi("x", t, data.shape)], [_vi("v", t, out_shape), _vi("i", TensorProto.INT64, out_shape)],
                                  [helper.make_tensor("k", TensorProto.INT64, [1], [k])])
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
            m.ir_version = 10
            want, got = _run_both(m, {"x": data}, device)
            rv, ri = _topk_ref(data, k, axis, largest)
            np.testing.assert_array_equal(got["i"], ri)
            np.testing.assert_array_equal(got["v"], rv)
            np.testing.assert_array_equal(got["i"], want["i"])


@pytest.mark.parametrize("device", DEVICES)
def test_gather_elements(device, rng):
    # Every axis, negative indices, indices smaller than the data off the axis,
    # int32 and int64 indices, float and fp16 data; against NumPy and the CPU.
    for npt, t in ((np.float32, TensorProto.FLOAT), (np.float16, TensorProto.FLOAT16)):
        data = rng.standard_normal((4, 5, 6)).astype(npt)
        for axis, ishape in ((0, (7, 3, 6)), (1, (2, 9, 5)), (-1, (4, 5, 11))):
            ax = axis % 3
            n = data.shape[ax]
            for it, ipt in ((TensorProto.INT64, np.int64), (TensorProto.INT32, np.int32)):
                idx = rng.integers(-n, n, ishape).astype(ipt)
                sub = data[tuple(slice(0, ishape[d]) if d != ax else slice(None) for d in range(3))]
                want = np.take_along_axis(sub, np.where(idx < 0, idx + n, idx).astype(np.int64), axis=ax)
                node = helper.make_node("GatherElements", ["d", "i"], ["y"], axis=axis)
                g = helper.make_graph([node], "ge", [_vi("d", t, data.shape), _vi("i", it, ishape)], [_vi("y", t, ishape)])
                m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
                m.ir_version = 10
                ref, got = _run_both(m, {"d": data, "i": idx}, device)
                np.testing.assert_array_equal(got["y"], want)
                np.testing.assert_array_equal(got["y"], ref["y"])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["CumSum", "CumProd"])
def test_cumulative_with_the_axis_given_at_run_time(device, op, rng):
    # The axis is a graph input: the CUDA kernel reads it on the device.
    x = (1 + rng.standard_normal((3, 4, 5)) / 10).astype(np.float32)
    ref = np.cumsum if op == "CumSum" else np.cumprod
    for at in (TensorProto.INT64, TensorProto.INT32):
        m = _model(helper.make_node(op, ["x", "axis"], ["y"], reverse=1), [_vi("x", TensorProto.FLOAT, x.shape),
                   _vi("axis", at, ())], [_vi("y", TensorProto.FLOAT, x.shape)])
        m.opset_import[0].version = 26 if op == "CumProd" else 14
        e = twinfer.load(m, device=device, sim_coverage="cuda", allow_cpu_fallback=False)
        for axis in (0, 1, -1):
            got = e.run({"x": x, "axis": np.array(axis, NP[at])})["y"].numpy()
            want = np.flip(ref(np.flip(x, axis), axis=axis), axis)
            np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)
        with pytest.raises(twinfer.Error, match="out of range"):
            e.run({"x": x, "axis": np.array(3, NP[at])})["y"].numpy()
        got = e.run({"x": x, "axis": np.array(2, NP[at])})["y"].numpy()  # the engine still works
        np.testing.assert_allclose(got, np.flip(ref(np.flip(x, 2), axis=2), 2), rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("eq, shapes", [
    ("ij,jk->ik", [(3, 5), (5, 4)]),
    ("bij,bjk->bik", [(2, 3, 5), (2, 5, 7)]),
    ("bhid,bhjd->bhij", [(2, 3, 5, 4), (2, 3, 6, 4)]),
    ("ii->i", [(5, 5)]),
    ("ii", [(4, 4)]),
    ("ij->", [(3, 7)]),
    ("ij->ji", [(3, 7)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
    ("i,i,i->", [(6,), (6,), (6,)]),
    ("ij,j->i", [(4, 1), (3,)]),  # a size-1 dim broadcast against its label
])
def test_einsum_direct_contraction(device, eq, shapes, rng):
    for t in (TensorProto.FLOAT, TensorProto.INT64):
        xs = [(rng.standard_normal(s) * 3).astype(NP[t]) for s in shapes]
        names = [f"x{k}" for k in range(len(xs))]
        want = np.einsum(eq, *[x.astype(np.float64) for x in xs])
        want = np.asarray(want).astype(NP[t])
        m = _model(helper.make_node("Einsum", names, ["y"], equation=eq), [_vi(n, t, x.shape) for n, x in zip(names, xs)],
                   [_vi("y", t, want.shape)])
        _, got = _run_both(m, dict(zip(names, xs)), device)
        if t == TensorProto.FLOAT:
            np.testing.assert_allclose(got["y"], want, rtol=1e-5, atol=1e-5)
        else:
            np.testing.assert_array_equal(got["y"], want)


@pytest.mark.parametrize("device", DEVICES)
def test_dft_and_stft(device, rng):
    F = TensorProto.FLOAT
    x = rng.standard_normal((2, 10, 3, 1)).astype(np.float32)  # real signal along axis 1
    xc = rng.standard_normal((2, 9, 2)).astype(np.float32)      # complex along axis 1
    cases = [  # (attrs, input, dft_length, reference)
        (dict(), x, None, np.fft.fft(x[..., 0], axis=1)),
        (dict(onesided=1), x, None, np.fft.rfft(x[..., 0], axis=1)),
        (dict(), x, 13, np.fft.fft(x[..., 0], n=13, axis=1)),
        (dict(inverse=1), xc, None, np.fft.ifft(xc[..., 0] + 1j * xc[..., 1], axis=1)),
        (dict(inverse=1, onesided=1), xc, None, np.fft.irfft(xc[..., 0] + 1j * xc[..., 1], axis=1)),
    ]
    for attrs, inp, n, ref in cases:
        ins = [_vi("x", F, inp.shape)]
        names = ["x"]
        inits = []
        if n is not None:
            names.append("n")
            inits.append(helper.make_tensor("n", TensorProto.INT64, [], [n]))
        want = np.stack([ref.real, ref.imag], -1) if np.iscomplexobj(ref) else ref[..., None]
        m = _model(helper.make_node("DFT", names, ["y"], axis=1, **attrs), ins, [_vi("y", F, want.shape)])
        m.opset_import[0].version = 17
        m.graph.initializer.extend(inits)
        _, got = _run_both(m, {"x": inp}, device)
        np.testing.assert_allclose(got["y"], want.astype(np.float32), rtol=1e-4, atol=1e-4)
    # STFT: frames of 8 every 3 samples under a Hann window, onesided.
    sig = rng.standard_normal((2, 29)).astype(np.float32)
    win = np.hanning(8).astype(np.float32)
    frames = 1 + (29 - 8) // 3
    m = _model(helper.make_node("STFT", ["s", "step", "w"], ["y"]), [_vi("s", F, sig.shape), _vi("w", F, win.shape)],
               [_vi("y", F, (2, frames, 5, 2))])
    m.opset_import[0].version = 17
    m.graph.initializer.extend([helper.make_tensor("step", TensorProto.INT64, [], [3])])
    _, got = _run_both(m, {"s": sig, "w": win}, device)
    ref = np.stack([np.fft.rfft(sig[:, f * 3:f * 3 + 8] * win, axis=-1) for f in range(frames)], 1)
    np.testing.assert_allclose(got["y"], np.stack([ref.real, ref.imag], -1).astype(np.float32), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_lrn(device, rng):
    x = rng.standard_normal((2, 7, 5, 3)).astype(np.float32)
    for size, beta in ((3, 0.75), (4, 0.6), (1, 0.75)):
        alpha, bias = 2e-3, 1.5
        m = _model(helper.make_node("LRN", ["x"], ["y"], size=size, alpha=alpha, beta=beta, bias=bias),
                   [_vi("x", TensorProto.FLOAT, x.shape)], [_vi("y", TensorProto.FLOAT, x.shape)])
        _, got = _run_both(m, {"x": x}, device)
        lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
        sq = np.zeros_like(x, dtype=np.float64)
        for c in range(7):
            sq[:, c] = (x[:, max(0, c - lo):min(6, c + hi) + 1].astype(np.float64) ** 2).sum(1)
        want = x / (bias + alpha / size * sq) ** beta
        np.testing.assert_allclose(got["y"], want.astype(np.float32), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_batchnorm_with_parameters_given_at_run_time(device, rng):
    x = rng.standard_normal((2, 5, 3, 4)).astype(np.float32)
    p = {"scale": rng.uniform(0.5, 1.5, 5), "b": rng.standard_normal(5), "mean": rng.standard_normal(5),
         "var": rng.uniform(0.5, 2.0, 5)}
    p = {k: v.astype(np.float32) for k, v in p.items()}
    m = _model(helper.make_node("BatchNormalization", ["x", "scale", "b", "mean", "var"], ["y"], epsilon=1e-3),
               [_vi("x", TensorProto.FLOAT, x.shape)] + [_vi(k, TensorProto.FLOAT, (5,)) for k in p],
               [_vi("y", TensorProto.FLOAT, x.shape)])
    _, got = _run_both(m, {"x": x, **p}, device)
    c = (slice(None), None, None)
    want = (x - p["mean"][c]) / np.sqrt(p["var"][c] + 1e-3) * p["scale"][c] + p["b"][c]
    np.testing.assert_allclose(got["y"], want, rtol=1e-5, atol=1e-5)
