"""A transformer's skip connection added inside the GEMM before it
(graph/passes/fuse_residual.cc; com.twinfer::MatMul's residual input):
device plans turn MatMul [+ bias] followed by Add(y, r), r of y's shape,
into one com.twinfer::MatMul(x, W, bias, r). On a GPU cuBLASLt adds r as its
C operand; the CPU kernels (oneDNN's binary-add post-op, the reference loop
for 16-bit types) serve the simulated device. Each case against onnxruntime
or NumPy at odd sizes (batch 3, 7 positions, 40 -> 24 features)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import twinfer
from conftest import SIM_AS_CUDA

DEVICES = [SIM_AS_CUDA, pytest.param("cuda", marks=pytest.mark.cuda)]
F = TensorProto.FLOAT
B, S, K, N = 3, 7, 40, 24


def _model(nodes, inputs, outputs, inits, opsets=(("", 17),)):
    g = helper.make_graph(nodes, "residual", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    m.ir_version = 10
    return m


def _ort(m, feeds):
    import onnxruntime as ort

    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _ops(e, feeds):
    return [r.op for r in e.kernel_report({k: v.shape for k, v in feeds.items()})]


def _block(rng, residual_after=False, act=None, extra_output=False, residual_from_matmul=True):
    """x @ W + b, then + r (r computed from another input after the MatMul
    when residual_after), optionally an activation between (not fusable).
    The residual is a layer's output (h @ Wh), as in a transformer: in fp16
    it is then fp16, where a float32 graph input would keep the Add float32.
    Without residual_from_matmul the residual is the input h_in itself (its
    MatMul would offer the Add a second GEMM to go into)."""
    w = numpy_helper.from_array(rng.standard_normal((K, N)).astype(np.float32) / 6, "w")
    wh = numpy_helper.from_array(rng.standard_normal((N, N)).astype(np.float32) / 5, "wh")
    bias = numpy_helper.from_array(rng.standard_normal(N).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["h_in", "wh"], ["h"]) if residual_from_matmul else
             helper.make_node("Identity", ["h_in"], ["h"]),
             helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])]
    y = "y"
    if act:
        nodes.append(helper.make_node(act, ["y"], ["ya"]))
        y = "ya"
    if residual_after:
        nodes.append(helper.make_node("Softmax", ["h"], ["r"], axis=-1))  # no elementwise chain to join
    nodes.append(helper.make_node("Add", ["r" if residual_after else "h", y], ["z"]))
    outputs = [("z", F, [B, S, N])] + ([("y", F, [B, S, N])] if extra_output else [])
    return _model(nodes, [("x", F, [B, S, K]), ("h_in", F, [B, S, N])], outputs, [w, wh, bias])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("residual_after", [False, True])
def test_residual_goes_into_the_matmul(device, precision, residual_after, rng, monkeypatch):
    m = _block(rng, residual_after=residual_after)
    feeds = {"x": rng.standard_normal((B, S, K)).astype(np.float32),
             "h_in": rng.standard_normal((B, S, N)).astype(np.float32)}
    (want,) = _ort(m, feeds)
    tol = {"fp32": 2e-5, "fp16": 2e-2, "bf16": 1e-1}[precision]
    for on in ("1", "0"):
        monkeypatch.setenv("TWINFER_FUSE_RESIDUAL", on)
        e = twinfer.load(m, device=device, precision=precision, sim_coverage="cuda", allow_cpu_fallback=False)
        rows = e.kernel_report({k: v.shape for k, v in feeds.items()})
        assert ("Add" in [r.op for r in rows]) == (on == "0"), rows
        if device == "cuda" and on == "1":  # cuBLASLt's C, not a kernel after it
            assert any(r.kernel == "cublasLt matmul + residual (C)" for r in rows), rows
        np.testing.assert_allclose(e.run(feeds)["z"].numpy(), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", ["activation_between", "output_read_elsewhere", "broadcast_residual"])
def test_residuals_that_must_stay_an_add(device, case, rng):
    # relu(x W + b) + r is not what the GEMM's C computes; a MatMul output
    # that is also a graph output must exist; an r that broadcasts up is not C.
    if case == "broadcast_residual":
        m = _block(rng, residual_from_matmul=False)
        m.graph.input[1].CopyFrom(helper.make_tensor_value_info("h_in", F, [1, S, N]))
        h = rng.standard_normal((1, S, N)).astype(np.float32)
    else:
        m = _block(rng, act="Relu" if case == "activation_between" else None,
                   extra_output=case == "output_read_elsewhere", residual_from_matmul=False)
        h = rng.standard_normal((B, S, N)).astype(np.float32)
    feeds = {"x": rng.standard_normal((B, S, K)).astype(np.float32), "h_in": h}
    e = twinfer.load(m, device=device, sim_coverage="cuda", allow_cpu_fallback=False)
    assert "Add" in _ops(e, feeds)
    want = _ort(m, feeds)
    out = e.run(feeds)
    for name, w in zip([o.name for o in m.graph.output], want):
        np.testing.assert_allclose(out[name].numpy(), w, rtol=2e-5, atol=2e-5)


def _fused_model(dtype, residual_shape, bias=True, activation=""):
    t = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}[dtype]
    names = ["a", "w", "b" if bias else "", "r"]
    node = helper.make_node("MatMul", names, ["y"], domain="com.twinfer", activation=activation)
    ins = [("a", t, [B, S, K]), ("w", t, [K, N]), ("r", t, residual_shape)] + ([("b", t, [N])] if bias else [])
    return _model([node], ins, [("y", t, [B, S, N])], [], opsets=(("", 17), ("com.twinfer", 1)))


@pytest.mark.parametrize("device", ["cpu", "sim", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("bias, activation", [(True, ""), (False, ""), (True, "Sigmoid")])
def test_fused_matmul_with_a_residual_input(device, dtype, bias, activation, rng):
    # The op as a model may carry it: act(a @ w + b + r) against NumPy.
    feeds = {"a": rng.standard_normal((B, S, K)).astype(dtype), "w": (rng.standard_normal((K, N)) / 6).astype(dtype),
             "r": rng.standard_normal((B, S, N)).astype(dtype)}
    if bias:
        feeds["b"] = rng.standard_normal(N).astype(dtype)
    want = feeds["a"].astype(np.float64) @ feeds["w"].astype(np.float64) + feeds["r"]
    if bias:
        want = want + feeds["b"]
    if activation == "Sigmoid":
        want = 1 / (1 + np.exp(-want))
    got = twinfer.load(_fused_model(dtype, [B, S, N], bias, activation), device=device).run(feeds)["y"].numpy()
    tol = 2e-5 if dtype == np.float32 else 1e-2
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("device", ["cpu", "sim"])
def test_a_residual_of_another_shape_is_refused_by_name(device, rng):
    m = _fused_model(np.float32, [B, 1, N])
    feeds = {"a": rng.standard_normal((B, S, K)).astype(np.float32), "w": rng.standard_normal((K, N)).astype(np.float32),
             "b": rng.standard_normal(N).astype(np.float32), "r": rng.standard_normal((B, 1, N)).astype(np.float32)}
    with pytest.raises(twinfer.Error, match="residual must have the output's shape"):
        twinfer.load(m, device=device).run(feeds)


@pytest.mark.parametrize("device", DEVICES)
def test_bert_layers_fuse_both_residuals(device, rng, tmp_path):
    # A BERT encoder (2 layers): the attention output and the MLP output each
    # add the layer's input inside their MatMul; no Add is left in the plan.
    pytest.importorskip("torch")
    from model_zoo import export, random_feeds

    path = export("bert", "torchscript", tmp_path)
    feeds = random_feeds("bert", rng, 2)
    e = twinfer.load(path, device=device, precision="fp16", sim_coverage="cuda", allow_cpu_fallback=False)
    ops = _ops(e, feeds)
    assert "Add" not in ops, ops
    import onnxruntime as ort

    (want,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_allclose(e.run(feeds)["output"].numpy().astype(np.float32), want, rtol=2e-2, atol=2e-2)


@pytest.mark.cuda_build
def test_fp8_leaves_a_matmul_with_a_residual_whole(rng):
    # precision="fp8" turns calibrated MatMuls into FP8MatMul, which has no
    # residual input: a model-carried com.twinfer::MatMul with one stays a
    # MatMul (the residual is never dropped); a plain MatMul beside it still
    # goes to FP8.
    w = numpy_helper.from_array((rng.standard_normal((64, 64)) / 8).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w", "", "r"], ["z"], domain="com.twinfer"),
             helper.make_node("MatMul", ["x", "w"], ["z2"])]
    m = _model(nodes, [("x", F, [4, 64]), ("r", F, [4, 64])], [("z", F, [4, 64]), ("z2", F, [4, 64])], [w],
               opsets=(("", 17), ("com.twinfer", 1)))
    feeds = {"x": rng.standard_normal((4, 64)).astype(np.float32),
             "r": (100 + rng.standard_normal((4, 64))).astype(np.float32)}
    e = twinfer.load(m, device="sim", precision="fp8", calibration=[feeds], sim_coverage="cuda")
    ops = _ops(e, feeds)
    assert ops.count("com.twinfer::FP8MatMul") == 1, ops
    want = feeds["x"] @ numpy_helper.to_array(w) + feeds["r"]
    np.testing.assert_allclose(e.run(feeds)["z"].numpy().astype(np.float32), want, rtol=2e-2, atol=2e-2)

