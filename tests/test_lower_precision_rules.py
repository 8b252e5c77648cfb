"""precision="fp16" / "bf16" change rounding, never meaning
(graph/passes/lower_precision.cc, after torch.autocast's lists): GEMMs and
convolutions run in 16 bits; exp, log, pow, sums, products and the model's own
casts to float32 stay float32; every other op runs in the type its operands
arrive in, and stays float32 where a constant it reads would change (1e-12 is
0 in fp16, 1e5 inf) or where all it computes is discrete (IsInf, Less,
ArgMax). Casts into 16 bits saturate. Each case failed before these rules,
against onnxruntime in float32, on the simulated device (the same pass plans
CUDA engines)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import twinfer
from onnx_helpers import run_ort

PRECISIONS = ["fp16", "bf16"]
vi = helper.make_tensor_value_info


def _model(nodes, inputs, outputs, inits=None, opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs,
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _both(m, feeds, precision):
    got = twinfer.load(m, device="sim", precision=precision).run(feeds)
    return [got[o.name].numpy() for o in m.graph.output], run_ort(m, feeds)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_models_cast_to_float32_keeps_integers_exact(precision):
    # int64 -> float -> int64 (T5's position buckets take this path): 70000
    # became inf in fp16, then the int64 maximum; 2049 became 2048.
    m = _model([helper.make_node("Cast", ["i"], ["f"], to=TP.FLOAT), helper.make_node("Mul", ["f", "one"], ["g"]),
                helper.make_node("Cast", ["g"], ["o"], to=TP.INT64)],
               [vi("i", TP.INT64, [5])], [vi("o", TP.INT64, [5])], {"one": np.float32(1)})
    feeds = {"i": np.array([1, 2049, 70000, -3, 12345], np.int64)}
    (got,), (want,) = _both(m, feeds, precision)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_float32_island_of_a_half_model_stays_float32(rng, precision):
    # An fp16 model's L2 norm computed in float32 (Cast up, x*x, ReduceSum,
    # Sqrt, Div, Cast down), as mixed-precision converters write it: x*x of
    # x ~ 300 overflowed fp16 and the output was 0.
    m = _model([helper.make_node("Cast", ["x"], ["xf"], to=TP.FLOAT), helper.make_node("Mul", ["xf", "xf"], ["sq"]),
                helper.make_node("ReduceSum", ["sq"], ["ss"], keepdims=1), helper.make_node("Sqrt", ["ss"], ["n"]),
                helper.make_node("Div", ["xf", "n"], ["u"]), helper.make_node("Cast", ["u"], ["y"], to=TP.FLOAT16)],
               [vi("x", TP.FLOAT16, [1, 64])], [vi("y", TP.FLOAT16, [1, 64])])
    x = (rng.standard_normal((1, 64)) * 300).astype(np.float16)
    (got,), (want,) = _both(m, {"x": x}, precision)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=0, atol=2e-3)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_discrete_results_of_float32_inputs_are_not_rounded_first(precision):
    x = np.array([[1e5, 1.0001, -1e6, np.inf, 2048.5, 1.0002]], np.float32)
    m = _model([helper.make_node("IsInf", ["x"], ["inf"]), helper.make_node("Less", ["x", "t"], ["less"]),
                helper.make_node("ArgMax", ["x"], ["arg"], axis=-1),
                helper.make_node("Equal", ["x", "x2"], ["eq"])],
               [vi("x", TP.FLOAT, [1, 6]), vi("x2", TP.FLOAT, [1, 6])],
               [vi("inf", TP.BOOL, None), vi("less", TP.BOOL, None), vi("arg", TP.INT64, None), vi("eq", TP.BOOL, None)],
               {"t": np.float32(2049)})
    x2 = x.copy()
    x2[0, 1] = 1.0002  # equal in 16 bits, not in float32
    got, want = _both(m, {"x": x, "x2": x2}, precision)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_float32_to_double_is_not_rounded_to_16_bits_first(precision):
    m = _model([helper.make_node("Cast", ["x"], ["d"], to=TP.DOUBLE), helper.make_node("Mul", ["d", "d"], ["y"])],
               [vi("x", TP.FLOAT, [3])], [vi("y", TP.DOUBLE, None)])
    (got,), (want,) = _both(m, {"x": np.array([1.0001, 2049.3, 1e5], np.float32)}, precision)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_constants_16_bits_cannot_hold_keep_their_op_float32(rng, precision):
    # eps 1e-12 (a decomposed LayerNorm, older BERT exports) was 0 in fp16: a
    # constant row became NaN; Clip at 1e-8 before a Log gave -inf; x / 1e5
    # divided by 65504; ConstantOfShape(1e5) became 65504.
    x = rng.standard_normal((3, 16)).astype(np.float32)
    x[1] = 0.5
    nodes = [helper.make_node("ReduceMean", ["x"], ["mu"], axes=[-1]), helper.make_node("Sub", ["x", "mu"], ["d"]),
             helper.make_node("Mul", ["d", "d"], ["d2"]), helper.make_node("ReduceMean", ["d2"], ["var"], axes=[-1]),
             helper.make_node("Add", ["var", "eps"], ["ve"]), helper.make_node("Sqrt", ["ve"], ["sd"]),
             helper.make_node("Div", ["d", "sd"], ["ln"]),
             helper.make_node("Abs", ["x"], ["ax"]), helper.make_node("Clip", ["ax", "floor"], ["cx"]),
             helper.make_node("Log", ["cx"], ["log"]),
             helper.make_node("Div", ["x", "big"], ["scaled"]),
             helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("ConstantOfShape", ["shape"], ["filled"],
                              value=numpy_helper.from_array(np.array([1e5], np.float32))),
             helper.make_node("Add", ["filled", "x"], ["shifted"])]
    m = _model(nodes, [vi("x", TP.FLOAT, [3, 16])],
               [vi(n, TP.FLOAT, None) for n in ("ln", "log", "scaled", "shifted")],
               {"eps": np.float32(1e-12), "floor": np.float32(1e-8), "big": np.float32(1e5)})
    x[2, 3] = 0.0  # Log(Clip(0, 1e-8)) = -18.42
    got, want = _both(m, {"x": x}, precision)
    tol = {"fp16": 4e-3, "bf16": 3e-2}[precision]
    for name, g, w in zip(("ln", "log", "scaled", "shifted"), got, want):
        assert np.isfinite(g).all(), name
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * np.abs(w).max(), err_msg=name)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_mask_input_filled_with_finfo_min_stays_finite(rng, precision):
    # Scores and an additive mask fed as model inputs: the cast into 16 bits
    # made finfo.min -inf, and a fully masked row NaN. Casts in saturate.
    m = _model([helper.make_node("Add", ["s", "mask"], ["sm"]), helper.make_node("Softmax", ["sm"], ["y"], axis=-1)],
               [vi("s", TP.FLOAT, [2, 6, 6]), vi("mask", TP.FLOAT, [2, 6, 6])], [vi("y", TP.FLOAT, None)])
    mask = np.where(rng.random((2, 6, 6)) < 0.3, np.finfo(np.float32).min, 0).astype(np.float32)
    mask[1, 2, :] = np.finfo(np.float32).min  # one query row fully masked: uniform in float32
    feeds = {"s": (rng.standard_normal((2, 6, 6)) * 3).astype(np.float32), "mask": mask}
    (got,), (want,) = _both(m, feeds, precision)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=0, atol={"fp16": 5e-3, "bf16": 3e-2}[precision])


@pytest.mark.parametrize("precision", PRECISIONS)
def test_pow_and_sums_stay_float32(rng, precision):
    # A decomposed RMSNorm (Pow, ReduceMean) and sqrt(ReduceSumSquare) of
    # x ~ 300: 300^2 and the sums overflowed fp16 (outputs 0 and inf).
    m = _model([helper.make_node("Pow", ["x", "two"], ["p"]), helper.make_node("ReduceMean", ["p"], ["ms"], axes=[-1]),
                helper.make_node("Add", ["ms", "eps"], ["mse"]), helper.make_node("Sqrt", ["mse"], ["rms"]),
                helper.make_node("Div", ["x", "rms"], ["rmsnorm"]),
                helper.make_node("ReduceSumSquare", ["x"], ["ss"], axes=[-1]), helper.make_node("Sqrt", ["ss"], ["norm"])],
               [vi("x", TP.FLOAT, [2, 64])], [vi("rmsnorm", TP.FLOAT, None), vi("norm", TP.FLOAT, None)],
               {"two": np.float32(2), "eps": np.float32(1e-6)})
    x = (rng.standard_normal((2, 64)) * 300).astype(np.float32)
    got, want = _both(m, {"x": x}, precision)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol={"fp16": 4e-3, "bf16": 3e-2}[precision])


def test_kernel_report_shows_where_a_plan_computes_in_16_bits(rng):
    # Which nodes stayed float32 could not be seen before (rows had no type).
    m = _model([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Exp", ["h"], ["e"]),
                helper.make_node("Relu", ["h"], ["r"])],
               [vi("x", TP.FLOAT, [3, 8])], [vi("e", TP.FLOAT, None), vi("r", TP.FLOAT, None)],
               {"w": rng.standard_normal((8, 4)).astype(np.float32)})
    rows = {r.op: r.dtype for r in twinfer.load(m, device="sim", precision="fp16").kernel_report({"x": (3, 8)})}
    assert rows["MatMul"] == rows["Relu"] == "float16" and rows["Exp"] == "float32", rows
    cpu_rows = twinfer.load(m, device="cpu").kernel_report({"x": (3, 8)})
    assert {r.dtype for r in cpu_rows} == {"float32"}


@pytest.mark.parametrize("precision", PRECISIONS)
def test_indices_beside_float_outputs_are_not_rounded_first(precision):
    # TopK of a float32 input computes values and indices: rounding the input
    # to 16 bits first swapped near-ties (1.0001 and 1.0002 are one fp16).
    x = np.array([[1.0001, 0.2, 1.0002, 1.00015, -3.0, 0.5]], np.float32)
    m = _model([helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=-1)], [vi("x", TP.FLOAT, [1, 6])],
               [vi("v", TP.FLOAT, None), vi("i", TP.INT64, None)], {"k": np.array([3], np.int64)})
    (v, i), (wv, wi) = _both(m, {"x": x}, precision)
    np.testing.assert_array_equal(i, wi)
    np.testing.assert_array_equal(v, wv)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_float32_graph_inputs_stay_float32_up_to_a_gemm(rng, precision):
    # A diffusion timestep embedding: t * freqs -> Sin/Cos -> Linear. With the
    # input counted as lowered the phase was lost (errors of 0.2 in fp16 and
    # 1.9 in bf16, against autocast's 6e-8), and Floor of 2049.5 gave 2050.
    freqs = np.exp(-np.log(10000) * np.arange(16) / 16).astype(np.float32)
    m = _model([helper.make_node("Unsqueeze", ["t", "one"], ["t1"]), helper.make_node("Mul", ["t1", "f"], ["a"]),
                helper.make_node("Sin", ["a"], ["s"]), helper.make_node("Cos", ["a"], ["c"]),
                helper.make_node("Concat", ["s", "c"], ["e"], axis=-1), helper.make_node("MatMul", ["e", "w"], ["y"]),
                helper.make_node("Floor", ["t"], ["fl"])],
               [vi("t", TP.FLOAT, [4])], [vi("y", TP.FLOAT, None), vi("fl", TP.FLOAT, None)],
               {"one": np.array([1], np.int64), "f": freqs, "w": (rng.standard_normal((32, 8)) / 6).astype(np.float32)})
    t = np.array([981.0, 2049.5, 37.25, 4097.9], np.float32)
    (y, fl), (wy, wfl) = _both(m, {"t": t}, precision)
    np.testing.assert_array_equal(fl, wfl)
    # Only the GEMM rounds: its inputs in [-1, 1], its weights ~N(0, 1/36).
    np.testing.assert_allclose(y, wy, rtol=0, atol={"fp16": 1e-2, "bf16": 5e-2}[precision])
