"""ONNX Attention (opsets 23-25) on the device (csrc/backends/cuda/attention.cu)
beyond the plain 4-D case, against the ONNX reference evaluator on fresh
random data with odd sizes (S = 7 queries, 9 keys, D = 12, 3 query heads,
batch 2): 3-D packed heads, grouped-query heads (one key head), an in-op KV
cache with present_key / present_value, padding lengths (nonpad_kv_seqlen),
softcap, sliding windows, a mask shorter than the keys, and the
qk_matmul_output output in its four modes; float32 and float16.

On the simulated device with sim_coverage="cuda" each node is placed as CUDA
would place it (allow_cpu_fallback=False: the CUDA kernel's supports() takes
it) and run by the CPU kernel, which shares its masking rules with the CUDA
kernel (csrc/ops/transformer/attention_math.h); on a GPU the CUDA kernel
itself runs. float16 cases compare with the reference's float32 result on the
same (rounded) data."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import twinfer
from conftest import SIM_AS_CUDA
from onnx_helpers import run_reference

DEVICES = [SIM_AS_CUDA, pytest.param("cuda", marks=pytest.mark.cuda)]
DTYPES = [np.float32, np.float16]
TOL = {np.float32: (2e-5, 2e-5), np.float16: (1e-2, 1e-2)}
ONNX_T = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16, np.int64: TensorProto.INT64,
          np.bool_: TensorProto.BOOL}

B, SQ, SKV, D, DV, HQ = 2, 7, 9, 12, 10, 3


def _model(dtype, feeds, outputs, opset=24, **attrs):
    """An Attention node over `feeds` (name -> array, in input order; None for
    an absent optional input) with `outputs` (Y, present_key, present_value,
    qk_matmul_output; None where not asked for)."""
    order = ["q", "k", "v", "mask", "past_key", "past_value", "nonpad"]
    names = [n if feeds.get(n) is not None else "" for n in order]
    while names and not names[-1]:
        names.pop()
    vis = [helper.make_tensor_value_info(n, ONNX_T[feeds[n].dtype.type], feeds[n].shape) for n in names if n]
    outs = [o if o else "" for o in outputs]
    node = helper.make_node("Attention", names, outs, **attrs)
    ovis = [helper.make_tensor_value_info(o, ONNX_T[dtype], None) for o in outs if o]
    m = helper.make_model(helper.make_graph([node], "attn", vis, ovis), opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def _check(dtype, feeds, outputs, device, opset=24, **attrs):
    feeds = {k: v for k, v in feeds.items() if v is not None}
    cast = {k: (v.astype(dtype) if v.dtype.kind == "f" else v) for k, v in feeds.items()}
    model = _model(dtype, cast, outputs, opset, **attrs)
    eng = twinfer.load(model, device=device, sim_coverage="cuda", allow_cpu_fallback=False)
    rows = eng.kernel_report({k: v.shape for k, v in cast.items()})
    assert [r.backend for r in rows if r.op == "Attention"] == [device], rows
    got = eng.run(cast)
    # The reference in float32 on the data as the device saw it.
    ref_feeds = {k: (v.astype(np.float32) if v.dtype.kind == "f" else v) for k, v in cast.items()}
    want = run_reference(_model(np.float32, ref_feeds, outputs, opset, **attrs), ref_feeds)
    rtol, atol = TOL[dtype]
    for name, w in zip([o for o in outputs if o], want):
        g = got[name].numpy()
        assert g.shape == w.shape, (name, g.shape, w.shape)
        assert g.dtype == np.dtype(dtype), (name, g.dtype)
        np.testing.assert_allclose(g.astype(np.float64), np.asarray(w, np.float64), rtol=rtol, atol=atol, err_msg=name)


def _r(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [0, 1])
def test_packed_heads_grouped_query(device, dtype, causal, rng):
    # 3-D [B, S, H * D] inputs, 3 query heads over 1 key head, value heads narrower.
    feeds = {"q": _r(rng, B, SQ, HQ * D), "k": _r(rng, B, SKV, D), "v": _r(rng, B, SKV, DV)}
    _check(dtype, feeds, ["y"], device, q_num_heads=HQ, kv_num_heads=1, is_causal=causal)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_grouped_query_4d_with_mask(device, dtype, rng):
    mask = rng.random((B, 1, SQ, SKV)) < 0.7
    mask[:, :, 3] = False  # a row with every key masked: zeros
    feeds = {"q": _r(rng, B, HQ, SQ, D), "k": _r(rng, B, 1, SKV, D), "v": _r(rng, B, 1, SKV, DV), "mask": mask}
    _check(dtype, feeds, ["y"], device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("in3d", [False, True])
@pytest.mark.parametrize("causal", [0, 1])
def test_kv_cache(device, dtype, in3d, causal, rng):
    # past (5 keys) + new (9 keys): present outputs and attention over all 14,
    # causal aligned bottom-right; 3 query heads over 1 key head.
    past = 5
    if in3d:
        feeds = {"q": _r(rng, B, SQ, HQ * D), "k": _r(rng, B, SKV, D), "v": _r(rng, B, SKV, DV)}
        attrs = dict(q_num_heads=HQ, kv_num_heads=1)
    else:
        feeds = {"q": _r(rng, B, HQ, SQ, D), "k": _r(rng, B, 1, SKV, D), "v": _r(rng, B, 1, SKV, DV)}
        attrs = {}
    feeds.update(past_key=_r(rng, B, 1, past, D), past_value=_r(rng, B, 1, past, DV))
    _check(dtype, feeds, ["y", "pk", "pv"], device, is_causal=causal, **attrs)
    # The cache without the present outputs (attention reads present from scratch).
    _check(dtype, feeds, ["y"], device, is_causal=causal, **attrs)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_present_without_past(device, dtype, rng):
    feeds = {"q": _r(rng, B, SQ, HQ * D), "k": _r(rng, B, SKV, HQ * D), "v": _r(rng, B, SKV, HQ * DV)}
    _check(dtype, feeds, ["y", "pk", "pv"], device, q_num_heads=HQ, kv_num_heads=HQ)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [0, 1])
def test_padding_lengths(device, dtype, causal, rng):
    # nonpad_kv_seqlen: keys at or after it masked; causal aligned to it.
    feeds = {"q": _r(rng, B, HQ, SQ, D), "k": _r(rng, B, HQ, SKV, D), "v": _r(rng, B, HQ, SKV, DV),
             "nonpad": np.array([SKV, 8], np.int64)}
    _check(dtype, feeds, ["y"], device, is_causal=causal)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_softcap_with_mask(device, dtype, rng):
    mask = _r(rng, SQ, SKV)
    feeds = {"q": 3 * _r(rng, B, HQ, SQ, D), "k": _r(rng, B, HQ, SKV, D), "v": _r(rng, B, HQ, SKV, DV), "mask": mask}
    _check(dtype, feeds, ["y"], device, softcap=2.5, scale=0.4)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_qk_output(device, dtype, mode, rng):
    mask = rng.random((HQ, SQ, SKV)) < 0.75
    mask[1, 2] = False
    feeds = {"q": _r(rng, B, HQ, SQ, D), "k": _r(rng, B, 1, SKV, D), "v": _r(rng, B, 1, SKV, DV), "mask": mask}
    _check(dtype, feeds, ["y", "", "", "qk"], device, qk_matmul_output_mode=mode, softcap=3.0)
    _check(dtype, {k: v for k, v in feeds.items() if k != "mask"}, ["y", "", "", "qk"], device,
           qk_matmul_output_mode=mode, is_causal=1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("window", [(2, -1), (-1, 1), (3, 0)])
def test_sliding_window(device, dtype, window, rng):
    feeds = {"q": _r(rng, B, HQ, SQ, D), "k": _r(rng, B, 1, SKV, D), "v": _r(rng, B, 1, SKV, DV),
             "past_key": _r(rng, B, 1, 2, D), "past_value": _r(rng, B, 1, 2, DV)}
    _check(dtype, feeds, ["y", "pk", "pv"], device, opset=25, left_window_size=window[0],
           right_window_size=window[1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_short_mask_with_cache(device, dtype, rng):
    # A float mask over the first 10 of 14 keys: the others are masked.
    feeds = {"q": _r(rng, B, HQ, SQ, D), "k": _r(rng, B, HQ, SKV, D), "v": _r(rng, B, HQ, SKV, DV),
             "mask": _r(rng, B, 1, SQ, 10), "past_key": _r(rng, B, HQ, 5, D), "past_value": _r(rng, B, HQ, 5, DV)}
    _check(dtype, feeds, ["y", "pk", "pv"], device)


@pytest.mark.parametrize("device", DEVICES)
def test_cuda_refuses_what_it_does_not_take(device, rng):
    # A mask of another float type than the data stays on the CPU, with a reason.
    feeds = {"q": _r(rng, B, HQ, SQ, D).astype(np.float16), "k": _r(rng, B, HQ, SKV, D).astype(np.float16),
             "v": _r(rng, B, HQ, SKV, DV).astype(np.float16), "mask": _r(rng, SQ, SKV)}
    model = _model(np.float16, feeds, ["y"])
    eng = twinfer.load(model, device=device, sim_coverage="cuda")
    rows = [r for r in eng.kernel_report({k: v.shape for k, v in feeds.items()}) if r.op == "Attention"]
    assert [r.backend for r in rows] == ["cpu"], rows


@pytest.mark.parametrize("device", DEVICES)
def test_padding_length_out_of_range_raises(device, rng):
    # On the GPU the kernel sets the error flag, read when the run synchronises.
    feeds = {"q": _r(rng, B, HQ, SQ, D), "k": _r(rng, B, HQ, SKV, D), "v": _r(rng, B, HQ, SKV, DV),
             "nonpad": np.array([SKV, SKV + 3], np.int64)}
    eng = twinfer.load(_model(np.float32, feeds, ["y"]), device=device, sim_coverage="cuda", allow_cpu_fallback=False)
    with pytest.raises(Exception, match="out"):
        eng.run(feeds)["y"].numpy()
