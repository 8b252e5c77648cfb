"""Attention as exporters spell it out becomes one com.twinfer::Attention in
device plans (graph/passes/fuse_attention.cc), computed without its scores in
memory (backends/cuda/attention.cu on a GPU). Each spelling is checked
against a float64 NumPy evaluation of the unfused graph and against the CPU
engine (which keeps the MatMuls); on the simulated device the fused op runs
the CPU's Attention kernel, on a GPU the CUDA one. Odd sizes: 3 heads of 24,
13 queries, 17 keys."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import twinfer
from conftest import SIM_AS_CUDA

F = TensorProto.FLOAT
DEVICES = [SIM_AS_CUDA, pytest.param("cuda", marks=pytest.mark.cuda)]
B, H, SQ, SK, D = 2, 3, 13, 17, 24


def _model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "attention", [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, F, s) for n, s in outputs], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    return m


def _scalar(name, v):
    return helper.make_tensor(name, F, [], [v])


def _reference(q, k, v, scale, mask=None):
    s = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k.astype(np.float64)) * scale
    if mask is not None:
        s = s + mask
    with np.errstate(invalid="ignore"):
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        p = p / p.sum(axis=-1, keepdims=True)
    p = np.where(np.isnan(p), 0.0, p)  # a row with every key masked: zeros
    return np.einsum("bhqk,bhkd->bhqd", p, v.astype(np.float64))


def _check(m, feeds, want, device, fused=1):
    e = twinfer.load(m, device=device, sim_coverage="cuda", allow_cpu_fallback=False)
    rows = e.kernel_report({k: v.shape for k, v in feeds.items()})
    assert sum(r.op == "com.twinfer::Attention" for r in rows) == fused, [(r.op, r.backend) for r in rows]
    got = e.run(feeds)["o"].numpy()
    cpu = twinfer.load(m, device="cpu").run(feeds)["o"].numpy()
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(cpu, want, rtol=2e-5, atol=2e-5)
    return e


@pytest.mark.parametrize("device", DEVICES)
def test_sdpa_export_with_mask_and_nan_guard(device, rng):
    # PyTorch's scaled_dot_product_attention: q and k^T each times sqrt(scale),
    # an additive mask, Softmax, Where(IsNaN(p), 0, p), then the values.
    c = float(np.sqrt(1 / np.sqrt(D)))
    nodes = [helper.make_node("Mul", ["q", "c"], ["qs"]), helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("Mul", ["kt", "c"], ["kts"]), helper.make_node("MatMul", ["qs", "kts"], ["s"]),
             helper.make_node("Add", ["s", "mask"], ["sm"]), helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
             helper.make_node("IsNaN", ["p"], ["bad"]), helper.make_node("Where", ["bad", "zero", "p"], ["pz"]),
             helper.make_node("MatMul", ["pz", "v"], ["o"])]
    m = _model(nodes, [("q", [B, H, SQ, D]), ("k", [B, H, SK, D]), ("v", [B, H, SK, D]), ("mask", [B, 1, 1, SK])],
               [("o", [B, H, SQ, D])], [_scalar("c", c), _scalar("zero", 0.0)])
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ([B, H, SQ, D], [B, H, SK, D], [B, H, SK, D]))
    mask = np.zeros((B, 1, 1, SK), np.float32)
    mask[1, :, :, 9:] = -np.inf  # the second sample's padding
    _check(m, {"q": q, "k": k, "v": v, "mask": mask}, _reference(q, k, v, c * c, mask), device)
    mask[0] = -np.inf  # every key of the first sample masked: its rows are zeros
    want = _reference(q, k, v, c * c, mask)
    assert not want[0].any()
    _check(m, {"q": q, "k": k, "v": v, "mask": mask}, want, device)


@pytest.mark.parametrize("device", DEVICES)
def test_classic_spelling_and_a_key_already_transposed(device, rng):
    # BERT's eager form: MatMul(q, k^T) / sqrt(d), Softmax, MatMul; here k^T is
    # the graph's input itself, so the pass adds the Transpose the op needs.
    nodes = [helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Div", ["s", "d"], ["sd"]),
             helper.make_node("Softmax", ["sd"], ["p"], axis=3), helper.make_node("MatMul", ["p", "v"], ["o"])]
    m = _model(nodes, [("q", [B, H, SQ, D]), ("kt", [B, H, D, SK]), ("v", [B, H, SK, 40])], [("o", [B, H, SQ, 40])],
               [_scalar("d", 5.0)])
    q, kt, v = (rng.standard_normal(s).astype(np.float32) for s in ([B, H, SQ, D], [B, H, D, SK], [B, H, SK, 40]))
    _check(m, {"q": q, "kt": kt, "v": v}, _reference(q, kt.transpose(0, 1, 3, 2), v, 0.2), device)


@pytest.mark.parametrize("device", DEVICES)
def test_scores_read_elsewhere_stay_unfused(device, rng):
    # The probabilities are also a graph output: fusing would lose them.
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["o"])]
    m = _model(nodes, [("q", [B, H, SQ, D]), ("k", [B, H, SK, D]), ("v", [B, H, SK, D])],
               [("o", [B, H, SQ, D]), ("p", [B, H, SQ, SK])])
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ([B, H, SQ, D], [B, H, SK, D], [B, H, SK, D]))
    _check(m, {"q": q, "k": k, "v": v}, _reference(q, k, v, 1.0), device, fused=0)


@pytest.mark.parametrize("device", DEVICES)
def test_pytorch_exports_fuse_and_match_pytorch(device, rng, tmp_path):
    # F.scaled_dot_product_attention with a boolean padding mask, and
    # nn.MultiheadAttention (ViT's block), exported by torch.onnx.
    torch = pytest.importorskip("torch")

    class Sdpa(torch.nn.Module):
        def forward(self, q, k, v, keep):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])

    class Mha(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.att = torch.nn.MultiheadAttention(48, 3, batch_first=True)

        def forward(self, x):
            return self.att(x, x, x, need_weights=False)[0]

    torch.manual_seed(0)
    q, k, v = (torch.randn(s) for s in ([B, H, SQ, D], [B, H, SK, D], [B, H, SK, D]))
    keep = torch.ones(B, SK, dtype=torch.bool)
    keep[1, 11:] = False
    x = torch.randn(B, SQ, 48)
    for module, args, names in ((Sdpa(), (q, k, v, keep), ["q", "k", "v", "keep"]), (Mha().eval(), (x,), ["x"])):
        path = tmp_path / f"{type(module).__name__}.onnx"
        torch.onnx.export(module, args, str(path), dynamo=False, input_names=names, output_names=["o"], opset_version=17)
        with torch.no_grad():
            want = module(*args).numpy()
        feeds = {n: a.numpy() for n, a in zip(names, args)}
        e = twinfer.load(path, device=device, sim_coverage="cuda", allow_cpu_fallback=False)
        rows = e.kernel_report({n: a.shape for n, a in feeds.items()})
        assert sum(r.op == "com.twinfer::Attention" for r in rows) == 1, [r.op for r in rows]
        np.testing.assert_allclose(e.run(feeds)["o"].numpy(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_onnx_attention_causal_and_a_short_mask_on_the_device(device, rng):
    # ONNX Attention (opset 24) itself: causal with fewer queries than keys
    # (upper-left without a cache: query i sees keys 0..i), and a boolean mask
    # whose key dim is shorter than the keys (opset 24 pads it with -inf),
    # which the CUDA kernel takes too (the keys after the mask are masked).
    def model(causal, mask_shape=None):
        ins = [("q", [B, H, SQ, D]), ("k", [B, H, SK, D]), ("v", [B, H, SK, D])]
        vis = [helper.make_tensor_value_info(n, F, s) for n, s in ins]
        names = ["q", "k", "v"]
        if mask_shape:
            vis.append(helper.make_tensor_value_info("mask", TensorProto.BOOL, mask_shape))
            names.append("mask")
        node = helper.make_node("Attention", names, ["o"], is_causal=int(causal))
        g = helper.make_graph([node], "a", vis, [helper.make_tensor_value_info("o", F, [B, H, SQ, D])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 24)])
        m.ir_version = 10
        return m

    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ([B, H, SQ, D], [B, H, SK, D], [B, H, SK, D]))
    scale = 1 / np.sqrt(D)
    causal = np.where(np.arange(SK)[None, :] > np.arange(SQ)[:, None], -np.inf, 0.0)
    e = twinfer.load(model(True), device=device, sim_coverage="cuda", allow_cpu_fallback=False)
    np.testing.assert_allclose(e.run({"q": q, "k": k, "v": v})["o"].numpy(), _reference(q, k, v, scale, causal),
                               rtol=2e-5, atol=2e-5)
    keep = rng.random((B, 1, SQ, 12)) < 0.8
    keep[..., 0] = True
    e = twinfer.load(model(False, [B, 1, SQ, 12]), device=device, sim_coverage="cuda", allow_cpu_fallback=False)
    rows = e.kernel_report({"q": q.shape, "k": k.shape, "v": v.shape, "mask": keep.shape})
    assert [r.backend for r in rows if r.op == "Attention"] == [device], rows
    additive = np.concatenate([np.where(keep, 0.0, -np.inf), np.full((B, 1, SQ, SK - 12), -np.inf)], axis=-1)
    np.testing.assert_allclose(e.run({"q": q, "k": k, "v": v, "mask": keep})["o"].numpy(),
                               _reference(q, k, v, scale, additive), rtol=2e-5, atol=2e-5)


def _fp16_attention(shapes, causal=False, mask_shape=None, mask_type=TensorProto.FLOAT16):
    h16 = TensorProto.FLOAT16
    names = ["q", "k", "v"] + (["mask"] if mask_shape else [])
    vis = [helper.make_tensor_value_info(n, mask_type if n == "mask" else h16, s)
           for n, s in zip(names, list(shapes) + [mask_shape])]
    node = helper.make_node("Attention", names, ["o"], is_causal=int(causal))
    out = [helper.make_tensor_value_info("o", h16, [shapes[0][0], shapes[0][1], shapes[0][2], shapes[2][3]])]
    m = helper.make_model(helper.make_graph([node], "a16", vis, out), opset_imports=[helper.make_opsetid("", 24)])
    m.ir_version = 10
    return m


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", ["plain", "causal", "padding_mask", "leading_keys_masked", "head_dim_20",
                                  "grouped_heads", "one_key_head_causal", "boolean_mask"])
def test_fp16_attention_on_cudnn_or_our_kernel(device, rng, case, monkeypatch):
    # float16 Attention: on a GPU cuDNN's fused flash attention takes head
    # dims that are multiples of 8 (here 64: ViT's and BERT's), with or
    # without causal or an additive mask; a head dim of 20 stays on our own
    # kernel, and the kernel's name says why. Odd sizes (37 queries, 53 keys,
    # 3 heads); a sample whose keys are all masked gives zeros; masking the
    # first 80 of 160 keys masks whole leading tiles (a flash kernel's running
    # max starts at -inf there). Grouped query heads (6 over 2, with a padding
    # mask; 6 over 1, causal) go to cuDNN as they are (its GQA), K and V
    # never repeated. A boolean mask goes to cuDNN as the additive bias it means.
    # Each on cuDNN (forced), on our kernel (forced), and as timed at build.
    b, h, sq, sk = 2, 3, 37, 160 if case == "leading_keys_masked" else 53
    hkv = h
    if case.startswith(("grouped", "one_key")):
        h, hkv = 6, 2 if case == "grouped_heads" else 1
    d = 20 if case == "head_dim_20" else 64
    q, k, v = (rng.standard_normal(s).astype(np.float16) for s in ([b, h, sq, d], [b, hkv, sk, d], [b, hkv, sk, d]))
    feeds = {"q": q, "k": k, "v": v}
    mask = None
    bias = None
    if case in ("padding_mask", "grouped_heads"):
        mask = np.zeros((b, 1, 1, sk), np.float16)
        mask[0, ..., 29:] = -np.inf
        mask[1] = -np.inf  # every key of the second sample masked
    if case == "leading_keys_masked":
        mask = np.zeros((b, 1, 1, sk), np.float16)
        mask[0, ..., :80] = -np.inf
        mask[1, ..., :150] = -np.inf
    if case == "boolean_mask":  # to cuDNN as the 0 / -inf bias it means; a sample's keys all masked
        mask = rng.random((b, 1, sq, sk)) < 0.8
        mask[1] = False
    if mask is not None:
        feeds["mask"] = mask
        bias = np.where(mask, 0.0, -np.inf) if mask.dtype == bool else mask.astype(np.float64)
    causal = case in ("causal", "one_key_head_causal")
    if causal:
        bias = np.where(np.arange(sk)[None, :] > np.arange(sq)[:, None], -np.inf, 0.0)
    m = _fp16_attention([q.shape, k.shape, v.shape], causal=causal, mask_shape=mask.shape if mask is not None else None,
                        mask_type=TensorProto.BOOL if case == "boolean_mask" else TensorProto.FLOAT16)
    want = _reference(q, np.repeat(k, h // hkv, axis=1), np.repeat(v, h // hkv, axis=1), 1 / np.sqrt(d), bias)
    for mode in ("cudnn", "ours", None):
        if mode:
            monkeypatch.setenv("TWINFER_ATTENTION", mode)
        else:
            monkeypatch.delenv("TWINFER_ATTENTION", raising=False)
        e = twinfer.load(m, device=device, sim_coverage="cuda", allow_cpu_fallback=False)
        rows = [r for r in e.kernel_report({n: a.shape for n, a in feeds.items()}) if r.op == "Attention"]
        assert len(rows) == 1
        kernel = rows[0].kernel
        if device == "cuda":
            if mode == "ours":
                assert kernel.startswith("cuda attention") and "TWINFER_ATTENTION=ours" in kernel, kernel
            elif case == "head_dim_20":
                assert "not cuDNN" in kernel, kernel
            elif mode == "cudnn":  # cuDNN must take these; a refusal is worth seeing here
                assert kernel.startswith("cudnn sdpa"), kernel
            else:  # both timed, the faster kept
                assert "timed: ours" in kernel and "cuDNN" in kernel, kernel
        got = e.run(feeds)["o"].numpy()
        assert got.dtype == np.float16
        if case in ("padding_mask", "grouped_heads", "boolean_mask"):
            assert not want[1].any() and not got[1].any(), mode
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=5e-3, atol=5e-3, err_msg=str(mode))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("type_name", ["float16", "bfloat16"])
@pytest.mark.parametrize("softmax", ["in_the_type", "float32_between_casts"])
def test_16_bit_attention_spelled_out_fuses(device, rng, type_name, softmax):
    # A model exported in float16 / bfloat16 spells attention in that type:
    # the scale a constant of the type, the mask added in it, and the softmax
    # either in the type or, as Hugging Face's eager attention writes it
    # (softmax(s, dtype=float32).to(s.dtype)), in float32 between two Casts.
    # Both become one Attention of the type. The model takes float32 and casts
    # (NumPy has no bfloat16).
    t = {"float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16}[type_name]
    scale = helper.make_tensor("root_d", t, [], [np.sqrt(D)])
    nodes = [helper.make_node("Cast", [n], [n + "_t"], to=t) for n in ("q", "k", "v", "mask")]
    nodes += [helper.make_node("Transpose", ["k_t"], ["kt"], perm=[0, 1, 3, 2]),
              helper.make_node("MatMul", ["q_t", "kt"], ["s"]),
              helper.make_node("Div", ["s", "root_d"], ["scaled"]),
              helper.make_node("Add", ["scaled", "mask_t"], ["masked"])]
    if softmax == "in_the_type":
        nodes.append(helper.make_node("Softmax", ["masked"], ["p"], axis=-1))
    else:
        nodes += [helper.make_node("Cast", ["masked"], ["masked_f"], to=F),
                  helper.make_node("Softmax", ["masked_f"], ["p_f"], axis=-1),
                  helper.make_node("Cast", ["p_f"], ["p"], to=t)]
    nodes += [helper.make_node("MatMul", ["p", "v_t"], ["o_t"]), helper.make_node("Cast", ["o_t"], ["o"], to=F)]
    shapes = [("q", [B, H, SQ, D]), ("k", [B, H, SK, D]), ("v", [B, H, SK, D]), ("mask", [B, 1, 1, SK])]
    m = _model(nodes, shapes, [("o", [B, H, SQ, D])], [scale])
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes[:3]}
    feeds["mask"] = np.zeros((B, 1, 1, SK), np.float32)
    feeds["mask"][1, ..., 9:] = -1e4  # the second sample's last keys masked
    e = twinfer.load(m, device=device, sim_coverage="cuda", allow_cpu_fallback=False)
    rows = [r for r in e.kernel_report({n: a.shape for n, a in feeds.items()}) if r.op == "com.twinfer::Attention"]
    assert len(rows) == 1 and rows[0].dtype == type_name, rows
    assert not any(r.op in ("Softmax", "MatMul") for r in e.kernel_report({n: a.shape for n, a in feeds.items()}))
    want = _reference(feeds["q"], feeds["k"], feeds["v"], 1 / np.sqrt(D), feeds["mask"].astype(np.float64))
    tol = 5e-3 if type_name == "float16" else 3e-2
    np.testing.assert_allclose(e.run(feeds)["o"].numpy(), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("heads,kv_heads", [(3, 3), (3, 1), (4, 2)])
def test_hugging_face_eager_attention_exports_fuse(device, rng, tmp_path, dtype, heads, kv_heads, monkeypatch):
    # Hugging Face's eager attention: K and V repeated per group of query
    # heads (repeat_kv: Unsqueeze, Expand, Reshape) where they have fewer
    # heads, scaling by a Python float, an additive mask, softmax(w,
    # dtype=float32).to(q.dtype), which TorchScript exports as a Softmax in
    # the model's type and, in float16, a Cast round trip through float32
    # (removed as exact), then the values: one Attention, reading K and V
    # unrepeated (grouped heads; 4 heads over 2 tells h / G from h % Hkv), in
    # float16 on cuDNN's fused attention (its GQA) on a GPU.
    torch = pytest.importorskip("torch")

    def repeat_kv(x, n_rep):
        b, kvh, s, d = x.shape
        return x[:, :, None, :, :].expand(b, kvh, n_rep, s, d).reshape(b, kvh * n_rep, s, d)

    class Eager(torch.nn.Module):
        def forward(self, q, k, v, mask):
            if kv_heads != heads:
                k, v = repeat_kv(k, heads // kv_heads), repeat_kv(v, heads // kv_heads)
            w = torch.matmul(q, k.transpose(2, 3)) * (q.shape[-1] ** -0.5) + mask
            w = torch.nn.functional.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
            return torch.matmul(w, v)

    q, k, v = (torch.from_numpy(rng.standard_normal(s).astype(dtype))
               for s in ([B, heads, SQ, D], [B, kv_heads, SK, D], [B, kv_heads, SK, D]))
    mask = torch.zeros(B, 1, SQ, SK, dtype=q.dtype)
    mask[1, ..., 11:] = -1e4
    path = tmp_path / "eager.onnx"
    names = ["q", "k", "v", "mask"]
    torch.onnx.export(Eager(), (q, k, v, mask), str(path), dynamo=False, input_names=names, output_names=["o"],
                      opset_version=17)
    feeds = {n: a.numpy() for n, a in zip(names, (q, k, v, mask))}
    monkeypatch.setenv("TWINFER_ATTENTION", "cudnn")  # asserted below; timed: test_fp16_attention_on_cudnn_or_our_kernel
    e = twinfer.load(path, device=device, sim_coverage="cuda", allow_cpu_fallback=False)
    rows = e.kernel_report({n: a.shape for n, a in feeds.items()})
    attention = [r for r in rows if r.op == "com.twinfer::Attention"]
    assert len(attention) == 1 and attention[0].dtype == np.dtype(dtype).name, rows
    repeats = [r.op for r in rows if r.op != "com.twinfer::Attention"]
    assert repeats == [], repeats
    if device == "cuda" and dtype == np.float16:
        assert attention[0].kernel.startswith("cudnn sdpa"), attention[0]
    groups = heads // kv_heads
    want = _reference(feeds["q"], np.repeat(feeds["k"], groups, axis=1), np.repeat(feeds["v"], groups, axis=1), D ** -0.5,
                      feeds["mask"].astype(np.float64))
    tol = 5e-3 if dtype == np.float16 else 2e-5
    np.testing.assert_allclose(e.run(feeds)["o"].numpy().astype(np.float64), want, rtol=tol, atol=tol)
