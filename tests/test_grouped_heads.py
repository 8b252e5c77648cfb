"""K and V repeated per group of query heads (Hugging Face's repeat_kv,
FlexAttention's expansion: Unsqueeze, Expand, Reshape) are read once per
group: a GEMM the attention fusion leaves takes each group's query heads as
its rows against the unrepeated K/V head
(graph/passes/matmul_reads_grouped_heads.h), so the repeated copy, G times
the cache and written every decode step, is gone. Checked against
onnxruntime on the original graph, with odd sizes, and by the plan's nodes
(no Expand left); TWINFER_MATMUL_READS_GROUPED_HEADS=0 brings the repeat
back."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import twinfer
from conftest import SIM_AS_CUDA
from onnx_helpers import run_ort

F = TensorProto.FLOAT
B, D = 2, 12


def _repeat(name, x, shape_5d, shape_4d):
    """Nodes repeating x [B, Hkv, S, D] per group as repeat_kv exports it."""
    return [
        helper.make_node("Unsqueeze", [x, "axis2"], [f"{name}_u"]),
        helper.make_node("Expand", [f"{name}_u", f"{name}_wide"], [f"{name}_e"]),
        helper.make_node("Reshape", [f"{name}_e", f"{name}_shape"], [name]),
    ], [numpy_helper.from_array(np.array(shape_5d, np.int64), f"{name}_wide"),
        numpy_helper.from_array(np.array(shape_4d, np.int64), f"{name}_shape")]


def _gqa_model(heads, kv_heads, sq, sk, extra_outputs=(), scale_on_k=False):
    """Eager GQA attention: softmax(q @ repeat(k)^T * s + mask) @ repeat(v)."""
    g = heads // kv_heads
    nodes, inits = [], [numpy_helper.from_array(np.array([2], np.int64), "axis2"),
                        numpy_helper.from_array(np.array(D ** -0.5, np.float32), "scale")]
    for name, d in (("kr", D), ("vr", D + 3)):
        n, i = _repeat(name, name[0], [B, kv_heads, g, sk, d], [B, heads, sk, d])
        nodes += n
        inits += i
    nodes.append(helper.make_node("Transpose", ["kr"], ["kt"], perm=[0, 1, 3, 2]))
    if scale_on_k:  # FlexAttention's form: the scale on K^T before the GEMM
        nodes += [helper.make_node("Mul", ["kt", "scale"], ["ks"]), helper.make_node("MatMul", ["q", "ks"], ["scores"]),
                  helper.make_node("Add", ["scores", "mask"], ["masked"])]
    else:
        nodes += [helper.make_node("MatMul", ["q", "kt"], ["s0"]), helper.make_node("Mul", ["s0", "scale"], ["scores"]),
                  helper.make_node("Add", ["scores", "mask"], ["masked"])]
    nodes += [helper.make_node("Softmax", ["masked"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "vr"], ["o"])]
    inputs = [helper.make_tensor_value_info("q", F, [B, heads, sq, D]),
              helper.make_tensor_value_info("k", F, [B, kv_heads, sk, D]),
              helper.make_tensor_value_info("v", F, [B, kv_heads, sk, D + 3]),
              helper.make_tensor_value_info("mask", F, [B, 1, sq, sk])]
    outputs = [helper.make_tensor_value_info(n, F, None) for n in ("o", *extra_outputs)]
    m = helper.make_model(helper.make_graph(nodes, "gqa", inputs, outputs, inits),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    return m


def _feeds(rng, heads, kv_heads, sq, sk):
    mask = np.zeros((B, 1, sq, sk), np.float32)
    mask[1, ..., sk - 3:] = -1e9  # the second sample's last keys are padding
    return {"q": rng.standard_normal((B, heads, sq, D)).astype(np.float32),
            "k": rng.standard_normal((B, kv_heads, sk, D)).astype(np.float32),
            "v": rng.standard_normal((B, kv_heads, sk, D + 3)).astype(np.float32), "mask": mask}


def _check(model, feeds, device="cpu", **kwargs):
    e = twinfer.load(model, device=device, **kwargs)
    ops = [r.op for r in e.kernel_report(feeds)]
    got = e.run(feeds)
    for name, want in zip([o.name for o in model.graph.output], run_ort(model, feeds)):
        np.testing.assert_allclose(got[name].numpy(), want, rtol=2e-5, atol=2e-5, err_msg=name)
    return ops


@pytest.mark.parametrize("heads,kv_heads", [(4, 2), (6, 1), (6, 3)])
@pytest.mark.parametrize("sq,sk", [(1, 37), (13, 29)])  # a decode step, a prefill
@pytest.mark.parametrize("scale_on_k", [False, True])
def test_cpu_gemms_read_kv_once_per_group(rng, heads, kv_heads, sq, sk, scale_on_k):
    model = _gqa_model(heads, kv_heads, sq, sk, scale_on_k=scale_on_k)
    ops = _check(model, _feeds(rng, heads, kv_heads, sq, sk))
    assert not {"Expand", "Unsqueeze"} & set(ops), ops
    assert ops.count("MatMul") == 2, ops


def test_switched_off_the_repeat_stays(rng, monkeypatch):
    # The check above can fail: without the pass the plan repeats K and V.
    monkeypatch.setenv("TWINFER_MATMUL_READS_GROUPED_HEADS", "0")
    ops = _check(_gqa_model(4, 2, 5, 11), _feeds(rng, 4, 2, 5, 11))
    assert ops.count("Expand") == 2, ops


def test_a_repeat_read_elsewhere_stays_for_that_reader(rng):
    # The repeated K is also an output: it is still written (for that reader),
    # V's repeat goes.
    ops = _check(_gqa_model(4, 2, 5, 11, extra_outputs=("kr",)), _feeds(rng, 4, 2, 5, 11))
    assert ops.count("Expand") == 1, ops


@pytest.mark.parametrize("device", [SIM_AS_CUDA])
def test_unfused_device_gemms_read_grouped_heads(rng, device):
    # On a device the attention fusion takes the whole pattern; where it
    # cannot (the scores are an output too), the GEMMs left read the groups.
    ops = _check(_gqa_model(6, 2, 7, 19, extra_outputs=("scores",)), _feeds(rng, 6, 2, 7, 19),
                 device=device, sim_coverage="cuda", allow_cpu_fallback=False)
    assert "com.twinfer::Attention" not in ops and "Expand" not in ops, ops


def test_hugging_face_eager_gqa_export_on_the_cpu(rng, tmp_path):
    # A real export: torch's repeat_kv (Shape-computed sizes, folded at plan
    # time), a float32 decode step of 8 query heads over 2 K/V heads.
    torch = pytest.importorskip("torch")

    def repeat_kv(x, n_rep):
        b, kvh, s, d = x.shape
        return x[:, :, None, :, :].expand(b, kvh, n_rep, s, d).reshape(b, kvh * n_rep, s, d)

    class Eager(torch.nn.Module):
        def forward(self, q, k, v):
            k, v = repeat_kv(k, 4), repeat_kv(v, 4)
            w = torch.softmax(torch.matmul(q, k.transpose(2, 3)) * (q.shape[-1] ** -0.5), dim=-1)
            return torch.matmul(w, v)

    shapes = ([3, 8, 1, 16], [3, 2, 41, 16], [3, 2, 41, 16])
    args = tuple(torch.from_numpy(rng.standard_normal(s).astype(np.float32)) for s in shapes)
    path = tmp_path / "eager_gqa.onnx"
    torch.onnx.export(Eager(), args, str(path), dynamo=False, input_names=["q", "k", "v"], output_names=["o"],
                      opset_version=17, dynamic_axes={"k": {2: "past"}, "v": {2: "past"}})
    feeds = {n: a.numpy() for n, a in zip(["q", "k", "v"], args)}
    e = twinfer.load(path, device="cpu")
    ops = [r.op for r in e.kernel_report(feeds)]
    assert "Expand" not in ops, ops
    want = torch.matmul(torch.softmax(args[0] @ repeat_kv(args[1], 4).transpose(2, 3) * 0.25, -1), repeat_kv(args[2], 4))
    np.testing.assert_allclose(e.run(feeds)["o"].numpy(), want.numpy(), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("device", ["cpu", SIM_AS_CUDA])
def test_dynamo_export_of_sdpa_with_repeated_kv(rng, tmp_path, device):
    # torch's dynamo exporter decomposes scaled_dot_product_attention with K^T
    # spelled in 3-D (Reshape [B * H, S, D], Transpose [0, 2, 1], Reshape
    # back; here the repeat's own Reshape folded into the first), as Hugging
    # Face's "sdpa" attention exports after repeat_kv. transposes_in_4d makes
    # it one 4-D Transpose: the CPU's GEMMs read K and V once per group, a
    # device plan fuses one Attention with grouped heads.
    torch = pytest.importorskip("torch")

    def repeat_kv(x, n_rep):
        b, kvh, s, d = x.shape
        return x[:, :, None, :, :].expand(b, kvh, n_rep, s, d).reshape(b, kvh * n_rep, s, d)

    class Sdpa(torch.nn.Module):
        def forward(self, q, k, v, mask):
            return torch.nn.functional.scaled_dot_product_attention(q, repeat_kv(k, 3), repeat_kv(v, 3), attn_mask=mask)

    shapes = ([2, 6, 11, 16], [2, 2, 29, 16], [2, 2, 29, 16], [2, 1, 11, 29])
    args = [torch.from_numpy(rng.standard_normal(s).astype(np.float32)) for s in shapes]
    path = tmp_path / "sdpa_gqa.onnx"
    torch.onnx.export(Sdpa(), tuple(args), str(path), dynamo=True, input_names=["q", "k", "v", "mask"],
                      output_names=["o"], opset_version=18)
    feeds = {n: a.numpy() for n, a in zip(["q", "k", "v", "mask"], args)}
    kwargs = {"sim_coverage": "cuda", "allow_cpu_fallback": False} if device == "sim" else {}
    e = twinfer.load(path, device=device, **kwargs)
    ops = [r.op for r in e.kernel_report(feeds)]
    assert "Expand" not in ops, ops
    if device == "sim":
        assert ops == ["com.twinfer::Attention"], ops
    with torch.no_grad():
        want = Sdpa()(*args).numpy()
    np.testing.assert_allclose(e.run(feeds)["o"].numpy(), want, rtol=2e-5, atol=2e-5)
