"""ONNX Attention (opsets 23-25) on the CPU in float32 as two batched oneDNN
GEMMs around a row pass (backends/cpu/onednn_attention.cc), against the ONNX
reference evaluator and onnxruntime on fresh random data with odd sizes:
3-D packed heads, grouped query heads, an in-op KV cache, padding lengths,
softcap, sliding windows, boolean and float masks (a row with every key
masked gives zeros), and each case checked to run on the GEMM form, not the
row loop; what the GEMM form leaves (float16, the qk_matmul_output output)
runs on the loop and says so."""

from __future__ import annotations

import numpy as np
import pytest

import twinfer
from onnx_helpers import run_ort, run_reference
from test_attention_cuda import _model

GEMMS, LOOP = "onednn gemms + softmax rows", "cpu loop"
B, SQ, SKV, D, DV, HQ = 2, 13, 29, 24, 20, 6


def _r(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _check(feeds, outputs, kernel=GEMMS, opset=24, threads=2, **attrs):
    feeds = {k: v for k, v in feeds.items() if v is not None}
    model = _model(np.float32, feeds, outputs, opset, **attrs)
    e = twinfer.load(model, device="cpu", num_threads=threads)
    rows = [r for r in e.kernel_report({k: v.shape for k, v in feeds.items()}) if r.op == "Attention"]
    assert [r.kernel for r in rows] == [kernel], rows
    got = e.run(feeds)
    want = run_reference(model, feeds)
    for name, w in zip([o for o in outputs if o], want):
        np.testing.assert_allclose(got[name].numpy(), w, rtol=2e-5, atol=2e-5, err_msg=name)
    return got


@pytest.mark.parametrize("kv_heads", [6, 2, 1])
@pytest.mark.parametrize("causal", [0, 1])
def test_packed_heads(rng, kv_heads, causal):
    feeds = {"q": _r(rng, B, SQ, HQ * D), "k": _r(rng, B, SKV, kv_heads * D), "v": _r(rng, B, SKV, kv_heads * DV)}
    _check(feeds, ["y"], q_num_heads=HQ, kv_num_heads=kv_heads, is_causal=causal)


@pytest.mark.parametrize("kv_heads", [6, 3, 1])
@pytest.mark.parametrize("mask", ["bool", "float", "none"])
def test_4d_grouped_heads_and_masks(rng, kv_heads, mask):
    feeds = {"q": _r(rng, B, HQ, SQ, D), "k": _r(rng, B, kv_heads, SKV, D), "v": _r(rng, B, kv_heads, SKV, DV)}
    if mask == "bool":
        feeds["mask"] = rng.random((B, 1, SQ, SKV)) < 0.7
        feeds["mask"][:, :, 4] = False  # a row with every key masked: zeros
    elif mask == "float":
        feeds["mask"] = _r(rng, SQ, SKV)  # broadcast over batches and heads
    got = _check(feeds, ["y"])
    if mask == "bool":
        assert not got["y"].numpy()[:, :, 4].any()


@pytest.mark.parametrize("in3d", [False, True])
@pytest.mark.parametrize("present", [True, False])
def test_kv_cache(rng, in3d, present):
    # past (5 keys) + new: attention over both, causal bottom-right, 6 query
    # heads over 2 key heads; without the present outputs the join is scratch.
    if in3d:
        feeds = {"q": _r(rng, B, SQ, HQ * D), "k": _r(rng, B, SKV, 2 * D), "v": _r(rng, B, SKV, 2 * DV)}
        attrs = dict(q_num_heads=HQ, kv_num_heads=2)
    else:
        feeds = {"q": _r(rng, B, HQ, SQ, D), "k": _r(rng, B, 2, SKV, D), "v": _r(rng, B, 2, SKV, DV)}
        attrs = {}
    feeds.update(past_key=_r(rng, B, 2, 5, D), past_value=_r(rng, B, 2, 5, DV))
    _check(feeds, ["y", "pk", "pv"] if present else ["y"], is_causal=1, **attrs)


def test_decode_step_against_a_long_cache(rng):
    # One query row per head against 300 cached keys (an LLM's decode step).
    feeds = {"q": _r(rng, 1, 8, 1, 64), "k": _r(rng, 1, 2, 1, 64), "v": _r(rng, 1, 2, 1, 64),
             "past_key": _r(rng, 1, 2, 300, 64), "past_value": _r(rng, 1, 2, 300, 64)}
    _check(feeds, ["y", "pk", "pv"], threads=1)


@pytest.mark.parametrize("causal", [0, 1])
def test_padding_lengths(rng, causal):
    feeds = {"q": _r(rng, B, HQ, SQ, D), "k": _r(rng, B, 3, SKV, D), "v": _r(rng, B, 3, SKV, DV),
             "nonpad": np.array([SKV, 17], np.int64)}
    _check(feeds, ["y"], is_causal=causal)


def test_softcap_scale_and_window(rng):
    feeds = {"q": 3 * _r(rng, B, HQ, SQ, D), "k": _r(rng, B, HQ, SKV, D), "v": _r(rng, B, HQ, SKV, DV),
             "mask": _r(rng, B, 1, SQ, SKV)}
    _check(feeds, ["y"], softcap=2.5, scale=0.4)
    _check({k: v for k, v in feeds.items() if k != "mask"}, ["y"], opset=25, left_window_size=4,
           right_window_size=1)


def test_opset_23_against_onnxruntime(rng):
    # onnxruntime's own Attention kernel as a second reference (grouped heads, causal).
    feeds = {"q": _r(rng, B, 8, 37, 32), "k": _r(rng, B, 2, 37, 32), "v": _r(rng, B, 2, 37, 32)}
    model = _model(np.float32, feeds, ["y"], 23, is_causal=1)
    got = twinfer.load(model, device="cpu").run(feeds)["y"].numpy()
    np.testing.assert_allclose(got, run_ort(model, feeds)[0], rtol=2e-5, atol=2e-5)


def test_what_the_gemms_leave_runs_on_the_loop(rng):
    feeds = {"q": _r(rng, B, HQ, SQ, D), "k": _r(rng, B, 2, SKV, D), "v": _r(rng, B, 2, SKV, DV)}
    _check(feeds, ["y", "", "", "qk"], kernel=LOOP, qk_matmul_output_mode=1)
    half = {k: v.astype(np.float16) for k, v in feeds.items()}
    model = _model(np.float16, half, ["y"])
    rows = [r for r in twinfer.load(model, device="cpu").kernel_report(half) if r.op == "Attention"]
    assert [r.kernel for r in rows] == [LOOP], rows


def test_a_long_sequence_goes_in_blocks_of_query_rows(rng):
    # 2 heads x 4200 keys: 2100 query rows of scores pass the 64 MB a block
    # holds, so rows go through as blocks of 1997 and 103. A float mask that
    # differs per query row and a grouped head check each block's rows land
    # where they belong.
    sq, sk, d = 2100, 4200, 8
    feeds = {"q": _r(rng, 1, 2, sq, d), "k": _r(rng, 1, 1, sk, d), "v": _r(rng, 1, 1, sk, d),
             "mask": _r(rng, sq, sk)}
    model = _model(np.float32, feeds, ["y"], 24)
    e = twinfer.load(model, device="cpu")
    assert [r.kernel for r in e.kernel_report(feeds) if r.op == "Attention"] == [GEMMS]
    got = e.run(feeds)["y"].numpy()
    q, k, v = (feeds[n].astype(np.float64) for n in "qkv")
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d) + feeds["mask"]
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    want = (p / p.sum(axis=-1, keepdims=True)) @ v
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


def test_an_inf_in_v_at_a_masked_key_gives_nan_as_the_peers_do(rng):
    # A masked key weighs 0 and 0 * inf is NaN: onnxruntime and ONNX's
    # reference (a MatMul of P and V) give NaN in every row, a row that sees
    # no key too; the GEMM form agrees (the float16 row loop skips such keys).
    feeds = {"q": _r(rng, 1, 2, 3, 4), "k": _r(rng, 1, 2, 5, 4), "v": _r(rng, 1, 2, 5, 4)}
    feeds["v"][:, :, 3] = np.inf
    mask = np.ones((1, 1, 3, 5), bool)
    mask[..., 3] = False
    mask[:, :, 1] = False
    feeds["mask"] = mask
    got = _check(feeds, ["y"], opset=23)["y"].numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(run_ort(_model(np.float32, feeds, ["y"], 23), feeds)[0]))
    assert np.isnan(got).all()
