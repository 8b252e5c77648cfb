"""onnxruntime's MatMulNBits (com.microsoft): block-quantized 2/4/8-bit weights,
as its MatMulNBitsQuantizer writes them (int4 language models, transformers.js
q4 files). Dequantized once at load (graph/passes/expand_contrib_nbits.cc);
against onnxruntime on fresh random blobs, scales and zero points, with K not
a multiple of the block and an odd N."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import twinfer
from onnx_helpers import contrib_model, run_ort

MS = "com.microsoft"


def _nbits_model(rng, K, N, bits, block, zeros, bias, scale_type=np.float32):
    blocks = (K + block - 1) // block
    inits = {"B": rng.integers(0, 256, (N, blocks, block * bits // 8)).astype(np.uint8),
             "scales": rng.uniform(0.01, 0.1, (N, blocks)).astype(scale_type)}
    ins = ["x", "B", "scales", "", "", ""]
    if zeros == "packed":
        inits["zeros"] = rng.integers(0, 256, (N, (blocks * bits + 7) // 8)).astype(np.uint8)
    elif zeros == "float":
        inits["zeros"] = rng.uniform(0, 2 ** bits - 1, (N, blocks)).astype(scale_type)
    if zeros != "none":
        ins[3] = "zeros"
    if bias:
        inits["bias"] = rng.standard_normal(N).astype(scale_type)
        ins[5] = "bias"
    while ins[-1] == "":
        ins.pop()
    elem = TensorProto.FLOAT if scale_type == np.float32 else TensorProto.FLOAT16
    node = helper.make_node("MatMulNBits", ins, ["y"], domain=MS, K=K, N=N, bits=bits, block_size=block)
    return contrib_model([node], [helper.make_tensor_value_info("x", elem, ["b", K])],
                         [helper.make_tensor_value_info("y", elem, None)], inits)


# onnxruntime's CPU build refuses 8 bits with float zero points: not compared.
@pytest.mark.parametrize("bits,zeros", [(4, "none"), (4, "packed"), (4, "float"), (8, "none"), (8, "packed")])
@pytest.mark.parametrize("bias", [False, True])
def test_matmul_nbits_against_onnxruntime(rng, bits, zeros, bias):
    K, N, block = 83, 13, 32  # K spans 3 blocks, the last one partial
    model = _nbits_model(rng, K, N, bits, block, zeros, bias)
    x = rng.standard_normal((5, K)).astype(np.float32)
    got = twinfer.load(model, device="cpu").run({"x": x})["y"].numpy()
    want = run_ort(model, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4 * np.abs(want).max())


def test_matmul_nbits_float16_on_the_simulated_gpu(rng):
    K, N = 64, 9
    model = _nbits_model(rng, K, N, 4, 16, "packed", True, np.float16)
    x = rng.standard_normal((6, K)).astype(np.float16)
    want = run_ort(model, {"x": x})[0].astype(np.float32)
    for device in ("cpu", "sim"):
        got = twinfer.load(model, device=device).run({"x": x})["y"].numpy().astype(np.float32)
        np.testing.assert_allclose(got, want, rtol=0, atol=5e-3 * np.abs(want).max())


def test_a_model_onnxruntimes_quantizer_wrote(rng):
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    K, H, N = 96, 40, 7
    inits = {"w1": rng.standard_normal((K, H)).astype(np.float32), "w2": rng.standard_normal((H, N)).astype(np.float32)}
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", K])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    quantizer = MatMulNBitsQuantizer(model, block_size=32, is_symmetric=False)
    quantizer.process()
    quantized = quantizer.model.model
    assert [n.op_type for n in quantized.graph.node].count("MatMulNBits") == 2
    x = rng.standard_normal((4, K)).astype(np.float32)
    want = run_ort(quantized, {"x": x})[0]
    got = twinfer.load(quantized, device="cpu").run({"x": x})["y"].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4 * np.abs(want).max())


def test_what_it_does_not_cover_is_refused_by_name(rng):
    model = _nbits_model(rng, 32, 4, 4, 16, "none", False)
    node = model.graph.node[0]
    node.input.extend(["", "g_idx"])
    model.graph.initializer.append(numpy_helper.from_array(np.zeros(32, np.int32), "g_idx"))
    with pytest.raises(twinfer.UnsupportedOpError, match="g_idx"):
        twinfer.load(model, device="cpu")


def test_weights_read_from_outside_an_if_branch_and_a_prepacked_layout_refused(rng):
    """A merged decoder's If branches read their weights from the enclosing graph."""
    inner = _nbits_model(rng, 40, 6, 4, 16, "packed", True)
    node, inits = inner.graph.node[0], list(inner.graph.initializer)
    then = helper.make_graph([node], "then", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("MatMul", ["x", "w_else"], ["y_else"])], "else", [],
                              [helper.make_tensor_value_info("y_else", TensorProto.FLOAT, None)])
    w_else = rng.standard_normal((40, 6)).astype(np.float32)
    model = contrib_model([helper.make_node("If", ["c"], ["out"], then_branch=then, else_branch=other)],
                          [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                           helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 40])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], {"w_else": w_else})
    model.graph.initializer.extend(inits)
    x = rng.standard_normal((3, 40)).astype(np.float32)
    want = run_ort(inner, {"x": x})[0]
    got = twinfer.load(model, device="cpu").run({"c": np.array(True), "x": x})["out"].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    packed = _nbits_model(rng, 32, 4, 4, 16, "none", False)
    packed.graph.node[0].attribute.append(helper.make_attribute("weight_prepacked", 1))
    with pytest.raises(twinfer.UnsupportedOpError, match="weight_prepacked"):
        twinfer.load(packed, device="cpu")
