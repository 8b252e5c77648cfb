"""A rewrite must never turn a loadable model into an error (issue 15).

Each case is a small graph that is valid ONNX but unusual for one of the
load-time rewrites (a bias of shape [1, 1, N], a bias that raises the rank, a
broadcast residual, float64 patterns, folds that would change a shape...).
Each must load, give onnxruntime's result, and be fused exactly where the
fused op computes the same thing (checked on the optimised graph's ops)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import twinfer
from onnx_helpers import run_ort, run_reference


def _model(nodes, inputs, outputs, inits=None, opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 10)
    return model


def _vi(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def _matches_onnxruntime(model, feeds, rtol=1e-5, atol=1e-5, reference=run_ort, **load):
    """Loads, runs, compares every output with onnxruntime (or, for what it
    has no kernel for, the ONNX reference evaluator); returns the engine."""
    engine = twinfer.load(model, device="cpu", **load)
    expected = reference(model, feeds)
    got = engine.run(feeds)
    for out, want in zip(model.graph.output, expected):
        have = got[out.name].numpy()
        assert have.shape == want.shape, (out.name, have.shape, want.shape)
        np.testing.assert_allclose(have, want, rtol=rtol, atol=atol, err_msg=out.name)
    return engine


def _ops(engine):
    return engine.op_histogram()


# --- MatMul + bias -----------------------------------------------------------

def test_matmul_bias_of_shape_1_1_n_is_fused_as_a_vector(rng):
    """jax2tf (magika) stores Dense biases as [1, 1, N]: the fusion reshapes
    it to [N] instead of failing at load."""
    w = rng.standard_normal((32, 64)).astype(np.float32)
    b = rng.standard_normal((1, 1, 64)).astype(np.float32)
    model = _model([helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Add", ["y", "b"], ["z"]),
                    helper.make_node("Relu", ["z"], ["out"])],
                   [_vi("x", ["batch", 7, 32])], [_vi("out", None)], {"w": w, "b": b})
    engine = _matches_onnxruntime(model, {"x": rng.standard_normal((3, 7, 32)).astype(np.float32)}, rtol=1e-4)
    assert _ops(engine) == {"com.twinfer::MatMul": 1}


@pytest.mark.parametrize("x_shape,b_shape", [((32,), (1, 64)), ((5, 32), (1, 1, 64))],
                         ids=["vector-x-bias-1xN", "matrix-x-bias-1x1xN"])
def test_matmul_bias_that_raises_the_rank_stays_unfused(rng, x_shape, b_shape):
    """Add broadcasts y up to the bias's rank: fusing would drop a dim."""
    w = rng.standard_normal((32, 64)).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    model = _model([helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Add", ["b", "y"], ["out"])],
                   [_vi("x", list(x_shape))], [_vi("out", None)], {"w": w, "b": b})
    engine = _matches_onnxruntime(model, {"x": rng.standard_normal(x_shape).astype(np.float32)}, rtol=1e-4)
    assert "com.twinfer::MatMul" not in _ops(engine)


def test_matmul_bias_with_a_dynamic_rank_input_stays_correct(rng):
    """x's rank comes from a Reshape whose target is an input: nothing proves
    the bias keeps y's rank, so only a 1-D bias may fuse."""
    w = rng.standard_normal((8, 16)).astype(np.float32)
    b = rng.standard_normal((1, 16)).astype(np.float32)
    model = _model([helper.make_node("Reshape", ["x", "shape"], ["xr"]), helper.make_node("MatMul", ["xr", "w"], ["y"]),
                    helper.make_node("Add", ["y", "b"], ["out"])],
                   [_vi("x", ["n", 8]), _vi("shape", [None], TensorProto.INT64)], [_vi("out", None)],
                   {"w": w, "b": b})
    # A 1-D x (the [1, 16] bias raises y to rank 2), then a 3-D one.
    for rows, shape in ((1, [8]), (4, [2, 2, 8])):
        x = rng.standard_normal((rows, 8)).astype(np.float32)
        _matches_onnxruntime(model, {"x": x, "shape": np.array(shape, np.int64)}, rtol=1e-4)


# --- Conv --------------------------------------------------------------------

@pytest.mark.parametrize("shift_is_constant", [True, False])
def test_conv_with_a_broadcast_residual_is_not_fused_as_a_residual(rng, shift_is_constant):
    """Add(conv, [1, C, 1, 1]) is a per-channel shift, not a residual. A
    constant one becomes the conv's bias (fold_conv_add); one fed at run time
    stays an Add, and then a Relu still may not fold over it."""
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    shift = rng.standard_normal((1, 8, 1, 1)).astype(np.float32)
    inputs, inits, feeds = [_vi("x", [1, 3, 9, 11])], {"w": w}, {"x": rng.standard_normal((1, 3, 9, 11)).astype(np.float32)}
    if shift_is_constant:
        inits["shift"] = shift
    else:
        inputs.append(_vi("shift", [1, 8, 1, 1]))
        feeds["shift"] = shift
    model = _model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]),
                    helper.make_node("Add", ["y", "shift"], ["z"]), helper.make_node("Relu", ["z"], ["out"])],
                   inputs, [_vi("out", None)], inits)
    engine = _matches_onnxruntime(model, feeds, rtol=1e-4, atol=1e-4)
    assert ("Add" in _ops(engine)) == (not shift_is_constant), _ops(engine)


def test_float64_conv_keeps_its_clip(rng):
    """The fused Conv's epilogue is float32: a float64 Conv + Clip stays two
    nodes (onnxruntime has no float64 Conv: the ONNX reference checks it)."""
    w = rng.standard_normal((4, 2, 3, 3))
    model = _model([helper.make_node("Conv", ["x", "w"], ["y"]),
                    helper.make_node("Clip", ["y", "lo", "hi"], ["out"])],
                   [_vi("x", [1, 2, 6, 6], TensorProto.DOUBLE)], [_vi("out", None, TensorProto.DOUBLE)],
                   {"w": w, "lo": np.array(-0.5), "hi": np.array(0.5)})
    engine = _matches_onnxruntime(model, {"x": rng.standard_normal((1, 2, 6, 6))}, reference=run_reference)
    assert "Clip" in _ops(engine)


@pytest.mark.parametrize("spatial", [1, 2, 3])
def test_conv_batchnorm_fold_in_1d_2d_3d_with_groups(rng, spatial):
    c = 4
    w = rng.standard_normal((c, 2) + (3,) * spatial).astype(np.float32)
    bn = {"s": rng.uniform(0.5, 1.5, c), "b": rng.uniform(-1, 1, c), "m": rng.uniform(-1, 1, c),
          "v": rng.uniform(0.2, 2, c)}
    model = _model([helper.make_node("Conv", ["x", "w"], ["y"], group=2),
                    helper.make_node("BatchNormalization", ["y", "s", "b", "m", "v"], ["out"], epsilon=1e-3)],
                   [_vi("x", [2, 4] + [7] * spatial)], [_vi("out", None)],
                   {"w": w, **{k: v.astype(np.float32) for k, v in bn.items()}})
    engine = _matches_onnxruntime(model, {"x": rng.standard_normal([2, 4] + [7] * spatial).astype(np.float32)},
                                  rtol=1e-4, atol=1e-4)
    assert "BatchNormalization" not in _ops(engine)


def test_pad_folds_into_conv_only_where_the_shapes_stay(rng):
    """A zero Pad (opset 18, given axes) before a strided, dilated Conv."""
    w = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    model = _model([helper.make_node("Pad", ["x", "pads", "", "axes"], ["xp"]),
                    helper.make_node("Conv", ["xp", "w"], ["out"], strides=[2, 1], dilations=[1, 2])],
                   [_vi("x", [1, 3, 10, 13])], [_vi("out", None)],
                   {"w": w, "pads": np.array([1, 2, 0, 3], np.int64), "axes": np.array([2, 3], np.int64)},
                   opset=18)
    engine = _matches_onnxruntime(model, {"x": rng.standard_normal((1, 3, 10, 13)).astype(np.float32)}, rtol=1e-4,
                                  atol=1e-4)
    assert "Pad" not in _ops(engine)


# --- Gemm, GELU ----------------------------------------------------------------

def test_gemm_with_column_bias_and_transposes_fuses_its_activation(rng):
    a = rng.standard_normal((6, 5)).astype(np.float32)
    c = rng.standard_normal((4, 1)).astype(np.float32)  # broadcast along N
    model = _model([helper.make_node("Gemm", ["x", "a", "c"], ["y"], transA=1, transB=1, alpha=0.5, beta=2.0),
                    helper.make_node("Sigmoid", ["y"], ["out"])],
                   [_vi("x", [5, 4])], [_vi("out", None)], {"a": a, "c": c})
    engine = _matches_onnxruntime(model, {"x": rng.standard_normal((5, 4)).astype(np.float32)}, rtol=1e-5)
    assert _ops(engine) == {"com.twinfer::Gemm": 1}


@pytest.mark.parametrize("elem,dtype", [(TensorProto.DOUBLE, np.float64), (TensorProto.FLOAT, np.float32)],
                         ids=["float64", "float32"])
def test_erf_gelu_pattern_in_other_float_types(rng, elem, dtype):
    nodes = [helper.make_node("Div", ["x", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["x", "a"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["out"])]
    consts = {"sqrt2": np.array(np.sqrt(2.0), dtype), "one": np.array(1.0, dtype), "half": np.array(0.5, dtype)}
    model = _model(nodes, [_vi("x", ["n", 7], elem)], [_vi("out", None, elem)], consts)
    # onnxruntime has no float64 Erf: the ONNX reference evaluator checks that one.
    reference = run_reference if dtype == np.float64 else run_ort
    engine = _matches_onnxruntime(model, {"x": rng.standard_normal((3, 7)).astype(dtype)}, rtol=1e-6,
                                  reference=reference)
    assert _ops(engine) == {"Gelu": 1}


# --- int8 rewrites -------------------------------------------------------------

def test_qdq_matmul_with_bias_of_shape_1_1_n(rng):
    """onnxruntime-style QDQ MatMul whose bias Add carries a [1, 1, N] bias."""
    w = rng.integers(-127, 128, (16, 8)).astype(np.int8)
    b = rng.standard_normal((1, 1, 8)).astype(np.float32)
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws"], ["wd"]),
             helper.make_node("MatMul", ["xd", "wd"], ["y"]), helper.make_node("Add", ["y", "b"], ["out"])]
    inits = {"xs": np.array(0.02, np.float32), "xz": np.array(128, np.uint8), "w": w,
             "ws": np.array(0.01, np.float32), "b": b}
    model = _model(nodes, [_vi("x", [2, 3, 16])], [_vi("out", None)], inits, opset=13)
    x = rng.uniform(-2, 2, (2, 3, 16)).astype(np.float32)
    _matches_onnxruntime(model, {"x": x}, rtol=1e-4, atol=1e-4)


def test_weight_only_int8_with_row_bias_and_3d_input(rng):
    """weights='int8' on a MatMul (3-D x) + [1, N] bias and a Gemm with C [1, N]."""
    w1 = rng.standard_normal((64, 96)).astype(np.float32)
    w2 = rng.standard_normal((96, 80)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["y"]), helper.make_node("Add", ["y", "b1"], ["h"]),
             helper.make_node("Reshape", ["h", "flat"], ["h2"]),
             helper.make_node("Gemm", ["h2", "w2", "c2"], ["out"])]
    inits = {"w1": w1, "w2": w2, "b1": rng.standard_normal((1, 96)).astype(np.float32),
             "c2": rng.standard_normal((1, 80)).astype(np.float32), "flat": np.array([-1, 96], np.int64)}
    model = _model(nodes, [_vi("x", [2, 5, 64])], [_vi("out", None)], inits)
    x = rng.standard_normal((2, 5, 64)).astype(np.float32)
    engine = twinfer.load(model, device="cpu", weights="int8")
    want = run_ort(model, {"x": x})[0]
    got = engine.run({"x": x})["out"].numpy()
    # int8 rows with per-channel scales: error ~ |w| / 127 per product, summed
    # over two layers of 64 and 96 terms; 2% of the output's scale covers it.
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 0.02 * np.abs(want).max()
    assert "com.twinfer::MatMulW8" in _ops(engine)
