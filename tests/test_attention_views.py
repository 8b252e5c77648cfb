"""Fused attention reading its operands and writing its output in place
(ops/transformer/attention_views.h, graph/passes/attention_views.cc).

Device plans hand com.twinfer::Attention strided views of the tensors the
copies around it started from (a packed QKV projection, [B, S, H*D] heads)
and of the tensor its output's copies end in, and drop those copies. Checked
here: the op with views against NumPy's strided views, malformed views
refused with a clear error, and exported ViT / BERT blocks against PyTorch
with the copies gone (and the same answers with the pass off). Odd sizes:
5 heads of 8 or 64, 7 and 11 positions, batch 3."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import twinfer
from conftest import SIM_AS_CUDA

DEVICES = ["cpu", SIM_AS_CUDA, pytest.param("cuda", marks=pytest.mark.cuda)]
ONNX_TYPE = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}


def _strided(flat, offset, dims, strides):
    return np.lib.stride_tricks.as_strided(flat[offset:], shape=dims, strides=[s * flat.itemsize for s in strides])


def _reference(q, k, v, scale, mask=None):
    s = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k.astype(np.float64)) * scale
    if mask is not None:
        s = s + mask
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return np.einsum("bhqk,bhkd->bhqd", p / p.sum(axis=-1, keepdims=True), v.astype(np.float64))


def _viewed_model(inputs, views, out_shape, out_view=None, dtype=np.float32, mask_shape=None, scale=0.3):
    """One com.twinfer::Attention; inputs: [(name, shape)] for q, k, v (names may repeat)."""
    t = ONNX_TYPE[dtype]
    names = [n for n, _ in inputs]
    seen = {}
    for n, s in inputs:
        seen.setdefault(n, s)
    vis = [helper.make_tensor_value_info(n, t, s) for n, s in seen.items()]
    if mask_shape:
        vis.append(helper.make_tensor_value_info("mask", t, mask_shape))
        names.append("mask")
    attrs = {"scale": scale}
    for name, vw in zip(["q_view", "k_view", "v_view"], views):
        if vw is not None:
            attrs[name] = vw
    if out_view is not None:
        attrs["out_view"], attrs["out_shape"] = out_view, out_shape
    node = helper.make_node("Attention", names, ["o"], domain="com.twinfer", **attrs)
    g = helper.make_graph([node], "views", vis, [helper.make_tensor_value_info("o", t, out_shape)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.twinfer", 1)])
    m.ir_version = 10
    return m


def _load(model, device):
    return twinfer.load(model, device=device, sim_coverage="cuda", allow_cpu_fallback=False)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("B", [1, 3])
def test_packed_qkv_sequence_first_as_vit_has_it(device, dtype, B, rng, monkeypatch):
    # nn.MultiheadAttention's in-projection [S, B, 3E]: q, k, v are its three
    # slices, heads of D inside each; the output written as [S*B, E], the
    # out-projection's rows. At batch 1 the batch stride is never stepped
    # (cuDNN gets it as an outer stride).
    S, H, D = 11, 5, 64 if dtype == np.float16 else 8
    E = H * D
    x = rng.standard_normal((S, B, 3 * E)).astype(dtype)
    views = [[i * E, B, H, S, D, 3 * E, D, 3 * B * E] for i in range(3)]
    m = _viewed_model([("x", [S, B, 3 * E])] * 3, views, [S * B, E], out_view=[E, D, B * E], dtype=dtype)
    monkeypatch.setenv("TWINFER_ATTENTION", "cudnn")  # the strides handed to cuDNN, asserted below
    e = _load(m, device)
    (row,) = e.kernel_report({"x": x.shape})
    if device == "cuda" and dtype == np.float16:
        assert row.kernel.startswith("cudnn sdpa"), row  # cuDNN takes the strides as they are
    got = e.run({"x": x})["o"].numpy()
    flat = x.reshape(-1)
    q, k, v = (_strided(flat, o[0], o[1:5], o[5:] + [1]) for o in views)
    want = np.zeros(S * B * E)
    _strided(want, 0, [B, H, S, D], [E, D, B * E, 1])[...] = _reference(q, k, v, 0.3)
    # fp16: Q·Kᵀ, the probabilities and P·V each rounded to fp16 (ONNX's
    # function body), against a float64 reference; an output near 0 where
    # 11 products of ~1 cancel was 5.4e-3 off for seed 1828273926.
    tol = 2e-5 if dtype == np.float32 else 1e-2
    np.testing.assert_allclose(got.astype(np.float64), want.reshape(S * B, E), rtol=tol, atol=tol)


@pytest.mark.parametrize("device", DEVICES)
def test_unaligned_views_a_model_carries_run_on_our_kernel(device, rng):
    # float16 views one element apart from cuDNN's 16-byte alignment (q starts
    # at element 1, strides odd): the result is still right; on a GPU our own
    # kernel takes them and its name says why cuDNN did not.
    B, H, S, D = 2, 3, 9, 64
    E = H * D
    x = rng.standard_normal(1 + B * S * (E + 1)).astype(np.float16)
    views = [[i, B, H, S, D, S * (E + 1), D, E + 1] for i in (1, 0, 1)]
    m = _viewed_model([("x", [x.size])] * 3, views, [B, H, S, D], dtype=np.float16)
    e = _load(m, device)
    (row,) = e.kernel_report({"x": x.shape})
    if device == "cuda":
        assert "not 16-byte aligned" in row.kernel, row
    got = e.run({"x": x})["o"].numpy()
    q, k, v = (_strided(x, o[0], o[1:5], o[5:] + [1]) for o in views)
    # fp16 steps against a float64 reference (see the test above).
    np.testing.assert_allclose(got.astype(np.float64), _reference(q, k, v, 0.3), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("device", DEVICES)
def test_heads_of_batch_first_tensors_with_a_mask(device, rng):
    # BERT's layout: q, k, v each [B, S, H*D] (k with more positions), a
    # padding mask [B, 1, 1, Sk], the output [B, Sq, H*D]; q starts 4
    # elements into a larger buffer.
    B, H, Sq, Sk, D = 3, 5, 7, 11, 8
    E = H * D
    q = rng.standard_normal(4 + B * Sq * E).astype(np.float32)
    k, v = (rng.standard_normal((B, Sk, E)).astype(np.float32) for _ in range(2))
    mask = np.zeros((B, 1, 1, Sk), np.float32)
    mask[1, ..., 6:] = -np.inf
    views = [[4, B, H, Sq, D, Sq * E, D, E], [0, B, H, Sk, D, Sk * E, D, E], [0, B, H, Sk, D, Sk * E, D, E]]
    m = _viewed_model([("q", [q.size]), ("k", list(k.shape)), ("v", list(v.shape))], views, [B, Sq, E],
                      out_view=[Sq * E, D, E], mask_shape=list(mask.shape))
    got = _load(m, device).run({"q": q, "k": k, "v": v, "mask": mask})["o"].numpy()
    qv = _strided(q, 4, [B, H, Sq, D], [Sq * E, D, E, 1])
    kv, vv = (a.reshape(B, Sk, H, D).transpose(0, 2, 1, 3) for a in (k, v))
    want = _reference(qv, kv, vv, 0.3, mask).transpose(0, 2, 1, 3).reshape(B, Sq, E)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("device", ["cpu", SIM_AS_CUDA])
@pytest.mark.parametrize("case, message", [
    ("past_the_end", "q_view view reaches past its tensor"),
    ("overlapping_output", "out_view does not write each element of the output exactly once"),
    ("q_view_alone", "q_view, k_view and v_view go together"),
    ("short_attribute", "k_view must be 8 non-negative ints"),
    ("batch_mismatch", "different batch sizes"),
    ("out_shape_size", "out_shape holds"),
    ("repeating_keys", "k_view view repeats elements"),
])
def test_malformed_views_are_refused_by_name(device, case, message, rng):
    # A model may carry these attributes: nothing may read or write outside a tensor.
    B, H, S, D = 2, 3, 5, 4
    E = H * D
    views = [[0, B, H, S, D, S * E, D, E] for _ in range(3)]
    out_view, out_shape = [S * E, D, E], [B, S, E]
    if case == "past_the_end":
        views[0][0] = 1  # one element further: the last row runs off the end
    elif case == "overlapping_output":
        out_view = [S * E, 0, E]  # every head onto the same elements
    elif case == "q_view_alone":
        views[1] = views[2] = None
    elif case == "short_attribute":
        views[1] = views[1][:7]
    elif case == "batch_mismatch":
        views[2][1] = 1
    elif case == "out_shape_size":
        out_shape = [B, S, E + 1]
    elif case == "repeating_keys":  # 2^40 keys over a few elements: the kernels would size their work by it
        views[1] = [0, B, H, 2**40, D, S * E, D, 0]
        views[2] = [0, B, H, 2**40, D, S * E, D, 0]
    m = _viewed_model([("x", [B, S, E])] * 3, views, out_shape, out_view=out_view)
    x = rng.standard_normal((B, S, E)).astype(np.float32)
    with pytest.raises(twinfer.ModelFormatError, match=message):
        twinfer.load(m, device=device).run({"x": x})


# Exported blocks: PyTorch's own layouts, the copies counted in the plan.

def _export(module, args, names, path):
    torch = pytest.importorskip("torch")
    torch.onnx.export(module, args, str(path), dynamo=False, input_names=names, output_names=["o"], opset_version=17)
    with torch.no_grad():
        return module(*args).numpy()


def _mha(torch):
    class Mha(torch.nn.Module):  # ViT's attention: packed in-projection, sequence-first inside
        def __init__(self):
            super().__init__()
            self.att = torch.nn.MultiheadAttention(40, 5, batch_first=True)

        def forward(self, x):
            return self.att(x, x, x, need_weights=False)[0]

    return Mha().eval()


def _bert_self_attention(torch):
    class SelfAttention(torch.nn.Module):  # BERT's: heads by view + transpose, k^T, an additive mask
        def __init__(self, e=40, h=5):
            super().__init__()
            self.h, self.d = h, e // h
            self.q, self.k, self.v, self.o = (torch.nn.Linear(e, e) for _ in range(4))

        def heads(self, t):
            return t.view(t.shape[0], t.shape[1], self.h, self.d).transpose(1, 2)

        def forward(self, x, mask):
            q, k, v = self.heads(self.q(x)), self.heads(self.k(x)), self.heads(self.v(x))
            s = torch.matmul(q, k.transpose(-1, -2)) / self.d**0.5 + mask
            y = torch.matmul(torch.softmax(s, dim=-1), v).transpose(1, 2).contiguous()
            return self.o(y.view(y.shape[0], y.shape[1], -1))

    return SelfAttention().eval()


def _ops(engine, feeds):
    rows = engine.kernel_report({n: a.shape for n, a in feeds.items()})
    assert all(r.backend in (engine.device.split(":")[0], "sim") for r in rows), rows
    return [r.op for r in rows]


@pytest.mark.parametrize("device", [SIM_AS_CUDA, pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("block", ["vit", "bert"])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_exported_blocks_lose_their_copies(device, block, precision, rng, tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    torch.manual_seed(1)
    x = torch.randn(3, 7, 40)
    if block == "vit":
        module, args, names = _mha(torch), (x,), ["x"]
    else:
        mask = torch.zeros(3, 1, 1, 7)
        mask[2, ..., 4:] = float("-inf")
        module, args, names = _bert_self_attention(torch), (x, mask), ["x", "mask"]
    path = tmp_path / f"{block}.onnx"
    want = _export(module, args, names, path)
    feeds = {n: a.numpy() for n, a in zip(names, args)}
    tol = 1e-4 if precision == "fp32" else 2e-2
    results = {}
    for on in ("1", "0"):
        monkeypatch.setenv("TWINFER_ATTENTION_VIEWS", on)
        e = twinfer.load(path, device=device, precision=precision, sim_coverage="cuda", allow_cpu_fallback=False)
        ops = _ops(e, feeds)
        assert ops.count("com.twinfer::Attention") == 1, ops
        results[on] = (ops, e.run(feeds)["o"].numpy().astype(np.float32))
        np.testing.assert_allclose(results[on][1], want, rtol=tol, atol=tol)
    ops, _ = results["1"]
    copies_before = sum(op in ("Transpose", "Gather") for op in results["0"][0])
    # ViT's two row transposes around its projections ([B, S] <-> [S, B]
    # order) move across the GEMMs into the views too: no copy is left. In
    # fp16 the first reads x, a float32 graph input, which stays float32 up
    # to the GEMM's cast (autocast's rule: only GEMMs cast it down); that
    # conversion moves above the Transpose (lower_precision), which then
    # moves 16-bit values and is a view like the others.
    assert ops.count("Transpose") == 0, ops
    assert "Gather" not in ops and "Squeeze" not in ops, ops
    assert copies_before >= (9 if block == "vit" else 5), results["0"][0]
    if precision == "fp32":  # the same arithmetic, only read from elsewhere
        np.testing.assert_array_equal(results["1"][1], results["0"][1])


@pytest.mark.parametrize("device", [SIM_AS_CUDA, pytest.param("cuda", marks=pytest.mark.cuda)])
def test_operands_that_are_no_view_keep_their_copies(device, rng):
    # k arrives as [B, H, D, Sk] (a graph input): its [B, H, Sk, D] form has
    # no contiguous head dim, so the Transpose the fusion added stays. The
    # output's transpose is also a graph output: it stays, and the Attention
    # writes [B, H, Sq, D] as before. q and v are read in place.
    B, H, Sq, Sk, D = 3, 5, 7, 11, 8
    F = TensorProto.FLOAT
    nodes = [
        helper.make_node("Reshape", ["xq", "shape_q"], ["q4"]),
        helper.make_node("Transpose", ["q4"], ["q"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["xv", "shape_v"], ["v4"]),
        helper.make_node("Transpose", ["v4"], ["v"], perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["q", "kt"], ["s"]),
        helper.make_node("Softmax", ["s"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["a"]),
        helper.make_node("Transpose", ["a"], ["o"], perm=[0, 2, 1, 3]),
    ]
    inits = [helper.make_tensor("shape_q", TensorProto.INT64, [4], [B, Sq, H, D]),
             helper.make_tensor("shape_v", TensorProto.INT64, [4], [B, Sk, H, D])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("xq", F, [B, Sq, H * D]),
                                       helper.make_tensor_value_info("kt", F, [B, H, D, Sk]),
                                       helper.make_tensor_value_info("xv", F, [B, Sk, H * D])],
                          [helper.make_tensor_value_info("o", F, [B, Sq, H, D]),
                           helper.make_tensor_value_info("a", F, [B, H, Sq, D])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    feeds = {"xq": rng.standard_normal((B, Sq, H * D)).astype(np.float32),
             "kt": rng.standard_normal((B, H, D, Sk)).astype(np.float32),
             "xv": rng.standard_normal((B, Sk, H * D)).astype(np.float32)}
    e = _load(m, device)
    ops = _ops(e, feeds)
    assert ops.count("Transpose") == 2, ops  # k's and the output's
    out = e.run(feeds)
    q = feeds["xq"].reshape(B, Sq, H, D).transpose(0, 2, 1, 3)
    v = feeds["xv"].reshape(B, Sk, H, D).transpose(0, 2, 1, 3)
    want = _reference(q, feeds["kt"].transpose(0, 1, 3, 2), v, 1.0)
    np.testing.assert_allclose(out["a"].numpy(), want, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(out["o"].numpy(), want.transpose(0, 2, 1, 3), rtol=2e-5, atol=2e-5)
