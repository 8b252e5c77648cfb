"""onnxruntime's dynamic quantization (quantize_dynamic: DynamicQuantizeLinear
-> MatMulInteger -> Cast -> Mul(x_scale * w_scale) [-> Add bias]) runs on the
CPU as one com.twinfer::QMatMul whose x scale and zero point are read per run
(graph/passes/fuse_matmul_integer.cc). The reference is onnxruntime running
the same quantized file with its optimizations off, i.e. node by node: the
fused kernel must give the same floats, and every pattern the pass must
refuse still runs unfused and right."""
import os

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import twinfer

ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")

F = TensorProto.FLOAT


def ort_plain(model_bytes: bytes, feeds: dict):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"]).run(None, feeds)


def ops_of(engine, shapes) -> list[str]:
    return [r.op for r in engine.kernel_report(shapes)]


def quantize(tmp_path, model, weight_type="QInt8", per_channel=False) -> bytes:
    src, dst = os.path.join(tmp_path, "f.onnx"), os.path.join(tmp_path, "q.onnx")
    with open(src, "wb") as f:
        f.write(model.SerializeToString())
    quantization.quantize_dynamic(src, dst, weight_type=getattr(quantization.QuantType, weight_type),
                                  per_channel=per_channel)
    with open(dst, "rb") as f:
        return f.read()


def linear_model(rng, k, n, bias=True, two_readers=False):
    """x [B, 7, k] -> MatMul(W [k, n]) [+ b]; with two_readers a second MatMul
    reads x too (the Q, K, V projections share one DynamicQuantizeLinear)."""
    w = rng.standard_normal((k, n)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"] if bias else ["y"])]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "b"))
        nodes.append(helper.make_node("Add", ["m", "b"], ["y"]))
    outputs = [helper.make_tensor_value_info("y", F, None)]
    if two_readers:
        inits.append(numpy_helper.from_array(rng.standard_normal((k, n + 3)).astype(np.float32), "w2"))
        nodes.append(helper.make_node("MatMul", ["x", "w2"], ["y2"]))
        outputs.append(helper.make_tensor_value_info("y2", F, None))
    g = helper.make_graph(nodes, "linear", [helper.make_tensor_value_info("x", F, ["B", 7, k])], outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
def test_quantize_dynamic_file_runs_as_qmatmul(tmp_path, rng, per_channel, bias):
    q = quantize(tmp_path, linear_model(rng, 37, 29, bias=bias), per_channel=per_channel)
    engine = twinfer.load(q, device="cpu")
    ops = ops_of(engine, {"x": (3, 7, 37)})
    assert "com.twinfer::QMatMul" in ops and "MatMulInteger" not in ops and "Cast" not in ops, ops
    assert ("Add" in ops) is False, ops  # the bias went into the epilogue (or there was none)
    for batch in (3, 1):
        x = (rng.standard_normal((batch, 7, 37)) * 2 + 0.4).astype(np.float32)
        want = ort_plain(q, {"x": x})[0]
        np.testing.assert_allclose(engine.run({"x": x})["y"].numpy(), want, rtol=1e-6, atol=1e-6 * np.abs(want).max())


def test_shared_dynamic_quantization_feeds_both_products(tmp_path, rng):
    q = quantize(tmp_path, linear_model(rng, 48, 40, two_readers=True))
    engine = twinfer.load(q, device="cpu")
    ops = ops_of(engine, {"x": (2, 7, 48)})
    assert ops.count("com.twinfer::QMatMul") == 2 and ops.count("DynamicQuantizeLinear") == 1, ops
    x = rng.standard_normal((2, 7, 48)).astype(np.float32)
    want = ort_plain(q, {"x": x})
    out = engine.run({"x": x})
    for name, w in zip(["y", "y2"], want):
        np.testing.assert_allclose(out[name].numpy(), w, rtol=1e-6, atol=1e-6 * np.abs(w).max())


def test_uint8_weights_with_a_zero_point_stay_unfused_and_right(tmp_path, rng):
    """QUInt8 weights carry a zero point (QMatMul's weights have none): the
    MatMulInteger chain runs as written."""
    q = quantize(tmp_path, linear_model(rng, 37, 29), weight_type="QUInt8")
    engine = twinfer.load(q, device="cpu")
    ops = ops_of(engine, {"x": (3, 7, 37)})
    assert "MatMulInteger" in ops and "com.twinfer::QMatMul" not in ops, ops
    x = rng.standard_normal((3, 7, 37)).astype(np.float32)
    want = ort_plain(q, {"x": x})[0]
    np.testing.assert_allclose(engine.run({"x": x})["y"].numpy(), want, rtol=1e-6, atol=1e-6 * np.abs(want).max())


def hand_chain(rng, k=19, n=23, *, swap=False, zero_point=True, w_zero=0, bias_shape=None, cast_is_output=False):
    """DynamicQuantizeLinear(x) -> MatMulInteger -> Cast -> Mul(., Mul(x_scale,
    w_scale)) [-> Add(bias)], written by hand to vary what the pass matches."""
    w = rng.integers(-127, 128, size=(k, n)).astype(np.int8)
    ws = np.asarray(rng.uniform(0.001, 0.02), np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(ws, "ws"),
             numpy_helper.from_array(np.int8(w_zero), "wz")]
    mm_inputs = ["xq", "w", "xz", "wz"] if zero_point else ["xq", "w"]
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("MatMulInteger", mm_inputs, ["acc"]),
             helper.make_node("Cast", ["acc"], ["accf"], to=F),
             helper.make_node("Mul", ["ws", "xs"] if swap else ["xs", "ws"], ["s"]),
             helper.make_node("Mul", ["s", "accf"] if swap else ["accf", "s"], ["m"])]
    outputs = [helper.make_tensor_value_info("y", F, None)]
    if bias_shape is not None:
        inits.append(numpy_helper.from_array(rng.standard_normal(bias_shape).astype(np.float32), "b"))
        nodes.append(helper.make_node("Add", ["b", "m"] if swap else ["m", "b"], ["y"]))
    else:
        nodes[-1].output[0] = "y"
    if cast_is_output:
        outputs.append(helper.make_tensor_value_info("accf", F, None))
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", F, ["B", k])], outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize("case,fused", [
    ("plain", True), ("swapped_operands", True), ("no_zero_point_inputs", True), ("bias", True),
    ("bias_2d", True),            # QMatMul fused, the [1, N] bias Add left as it is
    ("weight_zero_point", False), ("cast_is_a_graph_output", False),
])
def test_hand_written_chains(rng, case, fused):
    kw = {"plain": {}, "swapped_operands": {"swap": True, "bias_shape": (23,)},
          "no_zero_point_inputs": {"zero_point": False}, "bias": {"bias_shape": (23,)},
          "bias_2d": {"bias_shape": (1, 23)}, "weight_zero_point": {"w_zero": 3},
          "cast_is_a_graph_output": {"cast_is_output": True}}[case]
    model = hand_chain(rng, **kw)
    engine = twinfer.load(model, device="cpu")
    ops = ops_of(engine, {"x": (5, 19)})
    assert ("com.twinfer::QMatMul" in ops) == fused and ("MatMulInteger" in ops) != fused, ops
    if case == "bias_2d":
        assert "Add" in ops, ops
    x = (rng.standard_normal((5, 19)) + 0.2).astype(np.float32)
    want = ort_plain(model, {"x": x})
    got = engine.run({"x": x})
    for name, w in zip(["y", "accf"], want):
        np.testing.assert_allclose(got[name].numpy(), w, rtol=1e-6, atol=1e-6 * np.abs(w).max())


@pytest.mark.cuda_build
def test_device_placement_keeps_the_chain(rng):
    """The device kernels take only constant quantization parameters, so a
    device engine (the simulated device placing as CUDA does) keeps the
    chain as written."""
    model = hand_chain(rng, bias_shape=(23,))
    engine = twinfer.load(model, device="sim", sim_coverage="cuda")
    ops = ops_of(engine, {"x": (5, 19)})
    assert "MatMulInteger" in ops and "com.twinfer::QMatMul" not in ops, ops
    x = rng.standard_normal((5, 19)).astype(np.float32)
    want = ort_plain(model, {"x": x})[0]
    np.testing.assert_allclose(engine.run({"x": x})["y"].numpy(), want, rtol=1e-6, atol=1e-6 * np.abs(want).max())
