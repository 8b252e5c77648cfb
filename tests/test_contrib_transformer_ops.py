"""onnxruntime's transformer contrib ops, as its optimizer (onnxruntime.transformers)
writes them into BERT, RoBERTa, ALBERT, DistilBERT, Whisper, CLIP, T5 and
Llama-family models: Attention, MultiHeadAttention, EmbedLayerNormalization,
SkipSimplifiedLayerNormalization, SimplifiedLayerNormalization (default domain),
QuickGelu, BiasAdd, BiasSplitGelu, GemmFastGelu and RotaryEmbedding. Each is
rewritten into standard ops at load (graph/passes/expand_contrib_attention.cc,
expand_contrib_norms.cc, expand_contrib.cc) and must give onnxruntime's result
on fresh random data; GemmFastGelu and BiasSplitGelu, which onnxruntime runs
on CUDA only, against NumPy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import twinfer
from onnx_helpers import contrib_model, run_ort

MS = "com.microsoft"
DEVICES = ["cpu", "sim", pytest.param("cuda", marks=pytest.mark.cuda)]
I32 = TensorProto.INT32
I64 = TensorProto.INT64


_model = contrib_model


def _vi(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def _check(model, feeds, device="cpu", rtol=1e-4, atol=1e-5):
    engine = twinfer.load(model, device=device)
    assert any("com.microsoft" in line for line in engine.stats()["passes"])
    got = engine.run(feeds)
    for out, want in zip(model.graph.output, run_ort(model, feeds)):
        np.testing.assert_allclose(got[out.name].numpy(), want, rtol=rtol, atol=atol, err_msg=out.name)
    return engine


# ---- Attention (packed projection) -------------------------------------------------------------

B, S, D, N = 3, 7, 12, 3  # odd sizes: head size 4, batch 3


def _mask(rng, form):
    """mask_index in one of the forms onnxruntime's Attention takes."""
    if form == "lengths":
        return np.array([S, 4, 1], np.int32), [B]
    if form == "ends_starts":
        return np.array([S, 5, 3, 0, 2, 1], np.int32), [2 * B]
    if form == "flags_2d":
        m = (rng.random((B, S)) > 0.3).astype(np.int32)
        m[:, 0] = 1
        m[1, 2] = 2  # any value above 0 keeps the key
        return m, [B, S]
    m = (rng.random((B, S, S)) > 0.4).astype(np.int32)
    m[..., 0] = 1
    return m, [B, S, S]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("form", ["none", "lengths", "ends_starts", "flags_2d", "flags_3d"])
@pytest.mark.parametrize("causal", [0, 1])
def test_attention_masks(rng, device, form, causal):
    inits = {"w": rng.standard_normal((D, 3 * D)).astype(np.float32) * 0.5,
             "bias": rng.standard_normal(3 * D).astype(np.float32) * 0.1}
    feeds = {"x": rng.standard_normal((B, S, D)).astype(np.float32)}
    ins, vis = ["x", "w", "bias"], [_vi("x", ["batch", "seq", D])]
    if form != "none":
        feeds["mask"], shape = _mask(rng, form)
        ins.append("mask")
        vis.append(_vi("mask", shape, I32))
    node = helper.make_node("Attention", ins, ["y"], domain=MS, num_heads=N, unidirectional=causal)
    # A row whose every key is masked (causal and the key range disjoint):
    # onnxruntime adds -10000 to each score in float32, where a step is ~1e-3,
    # so its weights there are off by up to ~1e-3 (1e-4 in the outputs was
    # seen); a mask applied wrongly moves outputs by ~0.1.
    _check(_model([node], vis, [_vi("y", None)], inits), feeds, device, atol=1e-3 if causal else 1e-5)


@pytest.mark.parametrize("device,precision", [("cpu", "fp32"),
                                              pytest.param("sim", "fp16", marks=pytest.mark.cuda_build),
                                              pytest.param("sim", "bf16", marks=pytest.mark.cuda_build),
                                              pytest.param("cuda", "fp16", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("causal", [0, 1])
def test_attention_row_with_every_key_masked(rng, device, precision, causal):
    """A key length of 0: onnxruntime adds -10000 to every score of the row, a
    shift softmax ignores, so the row is plain attention over all keys. In 16
    bits score - 10000 rounds to steps of 8 (fp16) or 64 (bf16): the rewrite
    keeps every key of such a row instead, which is onnxruntime's answer."""
    inits = {"w": rng.standard_normal((D, 3 * D)).astype(np.float32) * 0.8,
             "bias": rng.standard_normal(3 * D).astype(np.float32) * 0.1}
    feeds = {"x": rng.standard_normal((B, S, D)).astype(np.float32), "mask": np.array([2, 0, S], np.int32)}
    node = helper.make_node("Attention", ["x", "w", "bias", "mask"], ["y"], domain=MS, num_heads=N,
                            unidirectional=causal)
    model = _model([node], [_vi("x", [B, S, D]), _vi("mask", [B], I32)], [_vi("y", None)], inits)
    kw = {"sim_coverage": "cuda"} if device == "sim" else {}
    got = twinfer.load(model, device=device, precision=precision, **kw).run(feeds)["y"].numpy()
    want = run_ort(model, feeds)[0]
    # Against the output's scale: ORT's own rounding of s - 10000 in float32,
    # and 16-bit rounding of every score and product (up to ~12% of the scale
    # in bf16 with large scores). The rounded-away row was the plain average of
    # V, at least 43% of the scale off (in NumPy over 200 seeds).
    atol = {"fp32": 1e-3, "fp16": 0.1, "bf16": 0.2}[precision] * np.abs(want).max()
    np.testing.assert_allclose(got[1], want[1], rtol=0, atol=atol)
    np.testing.assert_allclose(got, want, rtol=0, atol=atol)


def test_attention_qkv_sizes_scale_filter_and_bias(rng):
    """qkv_hidden_sizes with a wider value, a custom scale and mask filter, and
    an additive attention_bias per head."""
    dq, dv = 12, 18
    inits = {"w": rng.standard_normal((D, 2 * dq + dv)).astype(np.float32) * 0.5,
             "bias": rng.standard_normal(2 * dq + dv).astype(np.float32) * 0.1}
    feeds = {"x": rng.standard_normal((B, S, D)).astype(np.float32),
             "mask": np.array([S, 2, 5], np.int32),
             "ab": rng.standard_normal((1, N, S, S)).astype(np.float32)}
    node = helper.make_node("Attention", ["x", "w", "bias", "mask", "", "ab"], ["y"], domain=MS, num_heads=N,
                            qkv_hidden_sizes=[dq, dq, dv], scale=0.3, mask_filter_value=-50.0)
    model = _model([node], [_vi("x", [B, S, D]), _vi("mask", [B], I32), _vi("ab", [1, N, S, S])], [_vi("y", None)],
                   inits)
    _check(model, feeds)


@pytest.mark.parametrize("with_mask", [False, True])
def test_attention_with_past_and_present(rng, with_mask):
    """A decoder step: past [2, B, N, P, H] in, present [2, B, N, P+S, H] out, causal
    aligned to the last query (bottom-right), a key-length mask over past + new."""
    past_len, s = 5, 2
    h = D // N
    inits = {"w": rng.standard_normal((D, 3 * D)).astype(np.float32) * 0.5,
             "bias": rng.standard_normal(3 * D).astype(np.float32) * 0.1}
    feeds = {"x": rng.standard_normal((B, s, D)).astype(np.float32),
             "past": rng.standard_normal((2, B, N, past_len, h)).astype(np.float32)}
    ins, vis = ["x", "w", "bias", "", "past"], [_vi("x", [B, s, D]), _vi("past", [2, B, N, past_len, h])]
    if with_mask:
        feeds["mask"] = np.array([past_len + s, past_len + 1, 3], np.int32)
        ins[3] = "mask"
        vis.append(_vi("mask", [B], I32))
    node = helper.make_node("Attention", ins, ["y", "present"], domain=MS, num_heads=N, unidirectional=1)
    _check(_model([node], vis, [_vi("y", None), _vi("present", None)], inits), feeds)


def test_attention_refuses_what_it_does_not_cover(rng):
    inits = {"w": rng.standard_normal((D, 3 * D)).astype(np.float32)}
    node = helper.make_node("Attention", ["x", "w"], ["y"], domain=MS, num_heads=N, do_rotary=1)
    model = _model([node], [_vi("x", [B, S, D])], [_vi("y", None)], inits)
    with pytest.raises(twinfer.UnsupportedOpError, match="do_rotary"):
        twinfer.load(model, device="cpu")


def test_attention_mask_of_unknown_rank_is_refused_by_name(rng):
    inits = {"w": rng.standard_normal((D, 3 * D)).astype(np.float32)}
    node = helper.make_node("Attention", ["x", "w", "", "mask"], ["y"], domain=MS, num_heads=N)
    model = _model([node], [_vi("x", [B, S, D]), helper.make_tensor_value_info("mask", I32, None)], [_vi("y", None)],
                   inits)
    with pytest.raises(twinfer.UnsupportedOpError, match="rank is not known"):
        twinfer.load(model, device="cpu")


# ---- MultiHeadAttention (projections outside) --------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mask", ["none", "lengths", "flags_2d"])
def test_multi_head_attention_separate_qkv_with_bias(rng, device, mask):
    L = 5  # cross-attention: keys of another length
    feeds = {"q": rng.standard_normal((B, S, D)).astype(np.float32),
             "k": rng.standard_normal((B, L, D)).astype(np.float32),
             "v": rng.standard_normal((B, L, D)).astype(np.float32)}
    inits = {"bias": rng.standard_normal(3 * D).astype(np.float32) * 0.3}
    ins = ["q", "k", "v", "bias"]
    vis = [_vi("q", ["b", "s", D]), _vi("k", ["b", "l", D]), _vi("v", ["b", "l", D])]
    if mask == "lengths":
        feeds["m"] = np.array([L, 3, 1], np.int32)
        vis.append(_vi("m", [B], I32))
        ins.append("m")
    elif mask == "flags_2d":
        feeds["m"] = (rng.random((B, L)) > 0.3).astype(np.int32)
        feeds["m"][:, 0] = 1
        vis.append(_vi("m", [B, L], I32))
        ins.append("m")
    node = helper.make_node("MultiHeadAttention", ins, ["y"], domain=MS, num_heads=N)
    _check(_model([node], vis, [_vi("y", None)], inits), feeds, device)


def test_multi_head_attention_keys_and_values_per_head(rng):
    """Cross-attention with a precomputed key/value cache in [B, N, L, H]."""
    L, h = 6, D // N
    feeds = {"q": rng.standard_normal((B, S, D)).astype(np.float32),
             "k": rng.standard_normal((B, N, L, h)).astype(np.float32),
             "v": rng.standard_normal((B, N, L, h)).astype(np.float32),
             "m": np.array([L, 2, 4], np.int32)}
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v", "", "m"], ["y"], domain=MS, num_heads=N)
    model = _model([node], [_vi("q", [B, S, D]), _vi("k", [B, N, L, h]), _vi("v", [B, N, L, h]), _vi("m", [B], I32)],
                   [_vi("y", None)])
    _check(model, feeds)


def _unpacked_reference(rng, q, k, v, mask):
    """onnxruntime's CPU MultiHeadAttention takes no packed form: the reference is
    onnxruntime on the same operands unpacked by NumPy (q [B, S, D], k and v
    [B, N, L, H])."""
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v", "", "m"], ["y"], domain=MS, num_heads=N)
    model = _model([node], [_vi("q", list(q.shape)), _vi("k", list(k.shape)), _vi("v", list(v.shape)),
                            _vi("m", [B], I32)], [_vi("y", None)])
    return run_ort(model, {"q": q, "k": k, "v": v, "m": mask})[0]


def test_multi_head_attention_packed_kv(rng):
    L, h = 4, D // N
    q = rng.standard_normal((B, S, D)).astype(np.float32)
    kv = rng.standard_normal((B, L, N, 2, h)).astype(np.float32)
    mask = np.array([L, 1, 3], np.int32)
    node = helper.make_node("MultiHeadAttention", ["q", "kv", "", "", "m"], ["y"], domain=MS, num_heads=N)
    model = _model([node], [_vi("q", [B, S, D]), _vi("kv", [B, L, N, 2, h]), _vi("m", [B], I32)], [_vi("y", None)])
    got = twinfer.load(model, device="cpu").run({"q": q, "kv": kv, "m": mask})["y"].numpy()
    heads = kv.transpose(0, 2, 1, 3, 4)  # [B, N, L, 2, H]
    want = _unpacked_reference(rng, q, np.ascontiguousarray(heads[..., 0, :]), np.ascontiguousarray(heads[..., 1, :]),
                               mask)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_multi_head_attention_packed_qkv(rng):
    h = D // N
    qkv = rng.standard_normal((B, S, N, 3, h)).astype(np.float32)
    mask = np.array([2, S, 5], np.int32)
    node = helper.make_node("MultiHeadAttention", ["qkv", "", "", "", "m"], ["y"], domain=MS, num_heads=N)
    model = _model([node], [_vi("qkv", [B, S, N, 3, h]), _vi("m", [B], I32)], [_vi("y", None)])
    got = twinfer.load(model, device="cpu").run({"qkv": qkv, "m": mask})["y"].numpy()
    heads = qkv.transpose(0, 2, 1, 3, 4)  # [B, N, S, 3, H]
    q = np.ascontiguousarray(qkv[..., 0, :]).reshape(B, S, D)
    want = _unpacked_reference(rng, q, np.ascontiguousarray(heads[..., 1, :]), np.ascontiguousarray(heads[..., 2, :]),
                               mask)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_multi_head_attention_past_present_causal_and_bias(rng):
    past_len, s, h = 4, 3, D // N
    feeds = {"q": rng.standard_normal((B, s, D)).astype(np.float32),
             "k": rng.standard_normal((B, s, D)).astype(np.float32),
             "v": rng.standard_normal((B, s, D)).astype(np.float32),
             "ab": rng.standard_normal((B, 1, s, past_len + s)).astype(np.float32),
             "pk": rng.standard_normal((B, N, past_len, h)).astype(np.float32),
             "pv": rng.standard_normal((B, N, past_len, h)).astype(np.float32)}
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v", "", "", "ab", "pk", "pv"], ["y", "pko", "pvo"],
                            domain=MS, num_heads=N, unidirectional=1)
    vis = [_vi("q", [B, s, D]), _vi("k", [B, s, D]), _vi("v", [B, s, D]), _vi("ab", [B, 1, s, past_len + s]),
           _vi("pk", [B, N, past_len, h]), _vi("pv", [B, N, past_len, h])]
    _check(_model([node], vis, [_vi("y", None), _vi("pko", None), _vi("pvo", None)]), feeds)


# ---- Normalizations ----------------------------------------------------------------------------

@pytest.mark.parametrize("with_segments,with_mask,positions", [(True, True, None), (False, False, None),
                                                               (False, True, "row"), (True, False, "batch")])
def test_embed_layer_normalization(rng, with_segments, with_mask, positions):
    vocab, max_pos, h = 30, 16, 10
    inits = {"word": rng.standard_normal((vocab, h)).astype(np.float32),
             "pos": rng.standard_normal((max_pos, h)).astype(np.float32),
             "seg": rng.standard_normal((2, h)).astype(np.float32),
             "gamma": rng.uniform(0.5, 1.5, h).astype(np.float32),
             "beta": rng.standard_normal(h).astype(np.float32)}
    feeds = {"ids": rng.integers(0, vocab, (B, S)).astype(np.int32)}
    vis = [_vi("ids", ["b", "s"], I32)]
    ins = ["ids", "", "word", "pos", "", "gamma", "beta", "", ""]
    if with_segments:
        feeds["segments"] = rng.integers(0, 2, (B, S)).astype(np.int32)
        vis.append(_vi("segments", ["b", "s"], I32))
        ins[1], ins[4] = "segments", "seg"
    if with_mask:
        m = np.ones((B, S), np.int32)
        m[1, 4:] = 0
        m[2, 1] = 2  # onnxruntime counts the entries equal to 1
        feeds["mask"] = m
        vis.append(_vi("mask", ["b", "s"], I32))
        ins[7] = "mask"
    if positions:
        rows = 1 if positions == "row" else B
        feeds["position_ids"] = rng.integers(0, max_pos, (rows, S)).astype(np.int32)
        vis.append(_vi("position_ids", [rows, "s"], I32))
        ins[8] = "position_ids"
    while ins[-1] == "":
        ins.pop()
    node = helper.make_node("EmbedLayerNormalization", ins, ["y", "mask_index", "sum"], domain=MS, epsilon=1e-5)
    model = _model([node], vis, [_vi("y", None), _vi("mask_index", None, I32), _vi("sum", None)], inits)
    _check(model, feeds)


@pytest.mark.parametrize("with_bias,with_sum", [(False, True), (True, False), (True, True)])
def test_skip_simplified_layer_normalization(rng, with_bias, with_sum):
    h = 20
    inits = {"gamma": rng.uniform(0.5, 1.5, h).astype(np.float32)}
    ins = ["x", "skip", "gamma"]
    if with_bias:
        inits["bias"] = rng.standard_normal(h).astype(np.float32)
        ins.append("bias")
    outs = ["y", "", "", "sum"] if with_sum else ["y"]
    node = helper.make_node("SkipSimplifiedLayerNormalization", ins, outs, domain=MS, epsilon=1e-6)
    model = _model([node], [_vi("x", [B, S, h]), _vi("skip", [B, S, h])],
                   [_vi(o, None) for o in outs if o], inits)
    _check(model, {"x": rng.standard_normal((B, S, h)).astype(np.float32) * 3,
                   "skip": rng.standard_normal((B, S, h)).astype(np.float32)})


@pytest.mark.parametrize("shape", [(B, S, 16), (B, S, N, 8)])
def test_simplified_layer_normalization_in_the_default_domain(rng, shape):
    """Qwen3's per-head q/k norms are 4-D with a scale of the head size."""
    inits = {"scale": rng.uniform(0.5, 1.5, shape[-1]).astype(np.float32)}
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "scale"], ["y"], axis=-1, epsilon=1e-6,
                            stash_type=1)
    model = _model([node], [_vi("x", list(shape))], [_vi("y", None)], inits)
    _check(model, {"x": rng.standard_normal(shape).astype(np.float32) * 2})


def test_the_rms_inverse_deviation_output_is_refused_by_name(rng):
    inits = {"gamma": np.ones(8, np.float32)}
    node = helper.make_node("SkipSimplifiedLayerNormalization", ["x", "skip", "gamma"], ["y", "", "inv"], domain=MS)
    model = _model([node], [_vi("x", [2, 8]), _vi("skip", [2, 8])], [_vi("y", None), _vi("inv", None)], inits)
    with pytest.raises(twinfer.UnsupportedOpError, match="inv_std_var"):
        twinfer.load(model, device="cpu")


# ---- Activations -------------------------------------------------------------------------------

@pytest.mark.parametrize("alpha", [1.702, 1.0])
def test_quick_gelu(rng, alpha):
    node = helper.make_node("QuickGelu", ["x"], ["y"], domain=MS, alpha=alpha)
    _check(_model([node], [_vi("x", [B, S, 9])], [_vi("y", None)]),
           {"x": rng.standard_normal((B, S, 9)).astype(np.float32) * 4})


def test_quick_gelu_of_a_float16_model_stays_float16(rng):
    """alpha takes x's type: a float32 constant made the fp16 model's Mul float32."""
    node = helper.make_node("QuickGelu", ["x"], ["y"], domain=MS, alpha=1.702)
    model = _model([node], [_vi("x", ["b", 8], TensorProto.FLOAT16)], [_vi("y", None, TensorProto.FLOAT16)])
    x = rng.standard_normal((3, 8)).astype(np.float16)
    for device in ("cpu", "sim"):
        engine = twinfer.load(model, device=device)
        x32 = x.astype(np.float32)
        np.testing.assert_allclose(engine.run({"x": x})["y"].numpy().astype(np.float32),
                                   x32 / (1 + np.exp(-1.702 * x32)), rtol=5e-3, atol=5e-3)
        assert all(r.dtype == "float16" for r in engine.kernel_report({"x": x}) if r.dtype), device


def test_bias_add_against_numpy(rng):
    """onnxruntime runs BiasAdd on CUDA only: NumPy is the reference."""
    x, skip = (rng.standard_normal((B, S, 6)).astype(np.float32) for _ in range(2))
    bias = rng.standard_normal(6).astype(np.float32)
    node = helper.make_node("BiasAdd", ["x", "bias", "skip"], ["y"], domain=MS)
    model = _model([node], [_vi("x", [B, S, 6]), _vi("skip", [B, S, 6])], [_vi("y", None)], {"bias": bias})
    got = twinfer.load(model, device="cpu").run({"x": x, "skip": skip})["y"].numpy()
    np.testing.assert_allclose(got, x + bias + skip, rtol=1e-6, atol=1e-6)


def _gelu(x, tanh=False):
    if tanh:
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def test_bias_split_gelu_against_numpy(rng):
    """onnxruntime runs BiasSplitGelu on CUDA only: NumPy is the reference."""
    x = rng.standard_normal((B, S, 10)).astype(np.float32)
    bias = rng.standard_normal(10).astype(np.float32)
    node = helper.make_node("BiasSplitGelu", ["x", "bias"], ["y"], domain=MS)
    engine = twinfer.load(_model([node], [_vi("x", [B, S, 10])], [_vi("y", None)], {"bias": bias}), device="cpu")
    t = (x + bias).astype(np.float64)
    np.testing.assert_allclose(engine.run({"x": x})["y"].numpy(), t[..., :5] * _gelu(t[..., 5:]), rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("with_bias", [False, True])
def test_gemm_fast_gelu_against_numpy(rng, with_bias):
    """onnxruntime has no CPU kernel for GemmFastGelu: NumPy is the reference."""
    x = rng.standard_normal((B, S, 8)).astype(np.float32)
    inits = {"w": rng.standard_normal((8, 5)).astype(np.float32)}
    if with_bias:
        inits["bias"] = rng.standard_normal(5).astype(np.float32)
    node = helper.make_node("GemmFastGelu", ["x", "w"] + (["bias"] if with_bias else []), ["y"], domain=MS)
    engine = twinfer.load(_model([node], [_vi("x", [B, S, 8])], [_vi("y", None)], inits), device="cpu")
    t = x.astype(np.float64) @ inits["w"] + (inits["bias"] if with_bias else 0)
    np.testing.assert_allclose(engine.run({"x": x})["y"].numpy(), _gelu(t, tanh=True), rtol=1e-5, atol=1e-5)


# ---- RotaryEmbedding ---------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["bsd", "bnsh"])
@pytest.mark.parametrize("positions", ["ids", "offset"])
@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_embedding(rng, layout, positions, interleaved):
    h, max_pos = 8, 20
    rot = 4 if layout == "bsd" else h  # a partial rotary dim, and the whole head
    angles = rng.uniform(0, 6, (max_pos, rot // 2))
    inits = {"cos": np.cos(angles).astype(np.float32), "sin": np.sin(angles).astype(np.float32)}
    shape = [B, S, N * h] if layout == "bsd" else [B, N, S, h]
    feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
    if positions == "ids":
        feeds["pos"] = rng.integers(0, max_pos, (B, S)).astype(np.int64)
        pos_vi = _vi("pos", [B, S], I64)
    else:
        feeds["pos"] = np.array([5], np.int64)
        pos_vi = _vi("pos", [1], I64)
    attrs = {"interleaved": interleaved}
    if layout == "bsd":
        attrs.update(num_heads=N, rotary_embedding_dim=rot)
    node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain=MS, **attrs)
    _check(_model([node], [_vi("x", shape), pos_vi], [_vi("y", None)], inits), feeds)


def test_rotary_embedding_3d_without_num_heads(rng):
    """onnxruntime's optimizer writes the 3-D form without num_heads: the head
    size is twice the cache's width."""
    h, heads, max_pos = 8, 3, 12
    angles = rng.uniform(0, 6, (max_pos, h // 2))
    inits = {"cos": np.cos(angles).astype(np.float32), "sin": np.sin(angles).astype(np.float32)}
    feeds = {"x": rng.standard_normal((B, S, heads * h)).astype(np.float32),
             "pos": rng.integers(0, max_pos, (B, S)).astype(np.int64)}
    node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain=MS, interleaved=1)
    _check(_model([node], [_vi("x", [B, S, heads * h]), _vi("pos", [B, S], I64)], [_vi("y", None)], inits), feeds)


def test_attention_inside_an_if_branch_reads_the_outer_mask(rng):
    """A body's rewrite sees the enclosing graph's declared inputs (the mask's rank)."""
    inits = {"w": rng.standard_normal((D, 3 * D)).astype(np.float32) * 0.5}
    then = helper.make_graph([helper.make_node("Attention", ["x", "w", "", "mask"], ["y_then"], domain=MS,
                                               num_heads=N)], "then", [], [_vi("y_then", None)])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["y_else"])], "else", [], [_vi("y_else", None)])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)
    model = _model([node], [helper.make_tensor_value_info("c", TensorProto.BOOL, []), _vi("x", [B, S, D]),
                            _vi("mask", [B], I32)], [_vi("y", None)], inits)
    feeds = {"c": np.array(True), "x": rng.standard_normal((B, S, D)).astype(np.float32),
             "mask": np.array([S, 3, 1], np.int32)}
    _check(model, feeds)


# ---- A real optimized model --------------------------------------------------------------------

@pytest.mark.parametrize("variant", ["attention", "multi_head"])
def test_a_bert_that_onnxruntimes_optimizer_fused(tmp_path, variant):
    """A tiny random BERT (eager attention, TorchScript exporter), optimized by
    onnxruntime.transformers into EmbedLayerNormalization + Attention (or
    MultiHeadAttention) + SkipLayerNormalization + BiasGelu, with a padded batch."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=48, max_position_embeddings=32,
                                     attn_implementation="eager")
    model = transformers.BertModel(config).eval()

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids).last_hidden_state

    raw = tmp_path / "bert.onnx"
    ids = torch.randint(0, 50, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.int64)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {n: {0: "batch", 1: "seq"} for n in names}
    torch.onnx.export(Wrapped(), (ids, mask, torch.zeros_like(ids)), str(raw), input_names=names,
                      output_names=["last_hidden_state"], dynamic_axes=axes, opset_version=17, dynamo=False)
    options = FusionOptions("bert")
    if variant == "multi_head":
        options.use_multi_head_attention = True
    optimized = optimize_model(str(raw), model_type="bert", num_heads=4, hidden_size=32, optimization_options=options,
                               opt_level=0)
    ops = {n.op_type for n in optimized.model.graph.node if n.domain == MS}
    fused = "Attention" if variant == "attention" else "MultiHeadAttention"
    assert {"EmbedLayerNormalization", fused} <= ops, ops
    rng = np.random.default_rng(7)
    feeds = {"input_ids": rng.integers(0, 50, (3, 9)), "attention_mask": np.ones((3, 9), np.int64),
             "token_type_ids": rng.integers(0, 2, (3, 9))}
    feeds["attention_mask"][1, 5:] = 0
    feeds["attention_mask"][2, 2:] = 0
    engine = twinfer.load(optimized.model, device="cpu")
    np.testing.assert_allclose(engine.run(feeds)["last_hidden_state"].numpy(), run_ort(optimized.model, feeds)[0],
                               rtol=1e-4, atol=1e-5)


# ---- GroupQueryAttention (onnxruntime-genai's language models) ------------------------------------

def _gqa_case(rng, batch, seq, past, total, seqlens, packed=False, rotary=False, interleaved=0, **attrs):
    heads, kv_heads, h, max_pos = 4, 2, 16, 32  # onnxruntime's CPU kernel wants head sizes of 16s
    names = ["q", "k", "v", "pk", "pv", "seqlens", "total"]
    if packed:
        names[1:3] = ["", ""]
    feeds = {"q": rng.standard_normal((batch, seq, (heads + 2 * kv_heads if packed else heads) * h)).astype(np.float32),
             "seqlens": np.array(seqlens, np.int32), "total": np.array(total, np.int32)}
    if not packed:
        feeds["k"] = rng.standard_normal((batch, seq, kv_heads * h)).astype(np.float32)
        feeds["v"] = rng.standard_normal((batch, seq, kv_heads * h)).astype(np.float32)
    feeds["pk"] = rng.standard_normal((batch, kv_heads, past, h)).astype(np.float32)
    feeds["pv"] = rng.standard_normal((batch, kv_heads, past, h)).astype(np.float32)
    inits = {}
    if rotary:
        angles = rng.uniform(0, 6, (max_pos, h // 2))
        inits = {"cos": np.cos(angles).astype(np.float32), "sin": np.sin(angles).astype(np.float32)}
        names += ["cos", "sin"]
    node = helper.make_node("GroupQueryAttention", names, ["y", "present_key", "present_value"], domain=MS,
                            num_heads=heads, kv_num_heads=kv_heads, do_rotary=int(rotary),
                            rotary_interleaved=interleaved, **attrs)
    vis = [_vi(k_, list(v_.shape), I32 if v_.dtype == np.int32 else TensorProto.FLOAT) for k_, v_ in feeds.items()]
    model = _model([node], vis, [_vi("y", None), _vi("present_key", None), _vi("present_value", None)], inits)
    return model, feeds


def _check_gqa(model, feeds, device="cpu"):
    engine = twinfer.load(model, device=device)
    got = engine.run(feeds)
    want = run_ort(model, feeds)
    np.testing.assert_allclose(got["y"].numpy(), want[0], rtol=1e-4, atol=1e-5)
    for b, last in enumerate(feeds["seqlens"]):  # the keys each row holds (past them: whatever was there)
        for i, name in ((1, "present_key"), (2, "present_value")):
            assert got[name].numpy().shape == want[i].shape
            np.testing.assert_allclose(got[name].numpy()[b, :, :last + 1], want[i][b, :, :last + 1], rtol=1e-5,
                                       atol=1e-6, err_msg=name)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rotary,interleaved", [(False, 0), (True, 0), (True, 1)])
def test_group_query_attention_prompt_with_rows_of_other_lengths(rng, device, rotary, interleaved):
    model, feeds = _gqa_case(rng, batch=3, seq=6, past=0, total=6, seqlens=[5, 2, 3], rotary=rotary,
                             interleaved=interleaved)
    _check_gqa(model, feeds, device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rotary", [False, True])
def test_group_query_attention_next_token_with_a_past(rng, device, rotary):
    # Row 0 has 7 keys so far, row 1 has 4 (its past buffer holds garbage past them).
    model, feeds = _gqa_case(rng, batch=2, seq=1, past=7, total=8, seqlens=[7, 4], rotary=rotary)
    _check_gqa(model, feeds, device)


def test_group_query_attention_chunk_after_a_past_and_packed_qkv(rng):
    model, feeds = _gqa_case(rng, batch=1, seq=3, past=5, total=8, seqlens=[7], packed=True, rotary=True)
    _check_gqa(model, feeds)


@pytest.mark.parametrize("attrs", [{"softcap": 2.0}, {"scale": 0.1}, {"local_window_size": 3}])
def test_group_query_attention_softcap_scale_and_window(rng, attrs):
    model, feeds = _gqa_case(rng, batch=2, seq=5, past=0, total=5, seqlens=[4, 3], **attrs)
    _check_gqa(model, feeds)
    model, feeds = _gqa_case(rng, batch=2, seq=1, past=6, total=7, seqlens=[6, 5], **attrs)
    _check_gqa(model, feeds)


def test_group_query_attention_with_qwen3s_q_and_k_norms(rng):
    """q_norm_weight / k_norm_weight: an RMS norm per head of Q and K before the
    rotary. onnxruntime's CPU build refuses them; the reference is onnxruntime
    on Q and K normed by NumPy first."""
    model, feeds = _gqa_case(rng, batch=2, seq=1, past=5, total=6, seqlens=[5, 3], rotary=True)
    h = 16
    qw, kw = rng.uniform(0.5, 1.5, h).astype(np.float32), rng.uniform(0.5, 1.5, h).astype(np.float32)
    normed = dict(feeds)
    for name, w in (("q", qw), ("k", kw)):
        x = feeds[name].reshape(*feeds[name].shape[:2], -1, h).astype(np.float64)
        normed[name] = (x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w).reshape(feeds[name].shape)
        normed[name] = normed[name].astype(np.float32)
    want = run_ort(model, normed)
    node = model.graph.node[0]
    node.input.extend([""] * (14 - len(node.input)) + ["qw", "kw"])
    node.attribute.append(helper.make_attribute("qk_norm_epsilon", 1e-6))
    model.graph.initializer.extend([numpy_helper.from_array(qw, "qw"), numpy_helper.from_array(kw, "kw")])
    got = twinfer.load(model, device="cpu").run(feeds)
    np.testing.assert_allclose(got["y"].numpy(), want[0], rtol=1e-4, atol=1e-5)


def test_group_query_attention_bidirectional_bias_on_a_static_cache_and_prompt_position_ids(rng):
    """causal=0 attends every valid key; an attention_bias as wide as
    total_sequence_length on a longer past buffer; position_ids on a first
    prompt (onnxruntime counts up from the first one, for every row)."""
    model, feeds = _gqa_case(rng, batch=2, seq=5, past=0, total=5, seqlens=[4, 2], causal=0)
    _check_gqa(model, feeds)
    model, feeds = _gqa_case(rng, batch=2, seq=1, past=9, total=7, seqlens=[6, 4])
    node = model.graph.node[0]
    node.input.extend([""] * (10 - len(node.input)) + ["bias"])
    model.graph.input.append(_vi("bias", [2, 1, 1, 7]))
    feeds["bias"] = rng.standard_normal((2, 1, 1, 7)).astype(np.float32)
    _check_gqa(model, feeds)
    model, feeds = _gqa_case(rng, batch=2, seq=4, past=0, total=4, seqlens=[3, 3], rotary=True)
    node = model.graph.node[0]
    node.input.extend(["pos"])
    model.graph.input.append(_vi("pos", [2, 4], I64))
    feeds["pos"] = np.array([[3, 4, 5, 6], [0, 1, 2, 3]], np.int64)
    _check_gqa(model, feeds)


def test_group_query_attention_q_and_k_norm_epsilons(rng):
    model, feeds = _gqa_case(rng, batch=1, seq=3, past=0, total=3, seqlens=[2])
    h = 16
    qw, kw = rng.uniform(0.5, 1.5, h).astype(np.float32), rng.uniform(0.5, 1.5, h).astype(np.float32)
    normed = dict(feeds)
    for name, w, eps in (("q", qw, 0.5), ("k", kw, 0.25)):
        x = feeds[name].reshape(*feeds[name].shape[:2], -1, h).astype(np.float64)
        normed[name] = (x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w).reshape(feeds[name].shape)
        normed[name] = normed[name].astype(np.float32)
    want = run_ort(model, normed)
    node = model.graph.node[0]
    node.input.extend([""] * (14 - len(node.input)) + ["qw", "kw"])
    node.attribute.extend([helper.make_attribute("q_norm_epsilon", 0.5), helper.make_attribute("k_norm_epsilon", 0.25)])
    model.graph.initializer.extend([numpy_helper.from_array(qw, "qw"), numpy_helper.from_array(kw, "kw")])
    np.testing.assert_allclose(twinfer.load(model, device="cpu").run(feeds)["y"].numpy(), want[0], rtol=1e-4,
                               atol=1e-5)
