"""RotaryEmbedding, SwiGLU, CausalConvWithState and LinearAttention on the device
(csrc/backends/cuda/transformer_ops.cu) against the ONNX reference evaluator, on
fresh random data with odd sizes: RotaryEmbedding 3-D (num_heads) / 4-D input,
interleaved or not, full or partial rotary_embedding_dim, with position_ids
(caches [max_pos, rot/2]) or without (caches [B, S, rot/2]); SwiGLU with the
default and an explicit alpha; CausalConvWithState with and without bias and
past_state, every activation, kernel sizes 1 and 4, an input shorter than the
state; LinearAttention with every update rule, grouped query heads, decay per
head or per key dim, beta per head or shared, past_state, an explicit scale,
and without the present_state output.

On the simulated device with sim_coverage="cuda" the nodes are placed as CUDA
would place them (allow_cpu_fallback=False: each has a CUDA kernel whose
supports() takes it) and run by the CPU kernel, which shares its geometry and
per-element math with the CUDA kernel (csrc/ops/transformer/rotary_math.h,
causal_conv_math.h, linear_attention_geom.h); on a GPU the CUDA kernel itself
runs. float16 cases compare with the reference's float32 result on the same
(float16-rounded) data."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx import helper

import twinfer
from conftest import SIM_AS_CUDA
from onnx_helpers import make_model, run_on_device, run_reference

DEVICES = [SIM_AS_CUDA, pytest.param("cuda", marks=pytest.mark.cuda)]
TOL = {np.float32: (2e-5, 2e-5), np.float16: (1e-2, 1e-2)}
DTYPES = [np.float32, np.float16]


def _run_device(model, feeds, device):
    out = run_on_device(model, feeds, device)
    return [out[o.name] for o in model.graph.output]


def _check(build, feeds, device, dtype, tol=None):
    """Runs build(dtype) on the device with `feeds` in `dtype` (float inputs),
    compares with the reference evaluator running build(float32) on the same
    values in float32."""
    fd = {k: (v.astype(dtype) if v.dtype.kind == "f" else v) for k, v in feeds.items()}
    f32 = {k: (v.astype(np.float32) if v.dtype.kind == "f" else v) for k, v in fd.items()}
    got = _run_device(build(dtype), fd, device)
    want = run_reference(build(np.float32), f32)
    rtol, atol = tol or TOL[dtype]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape, (g.shape, w.shape)
        assert g.dtype == np.dtype(dtype)
        np.testing.assert_allclose(g.astype(np.float64), np.asarray(w, np.float64), rtol=rtol, atol=atol)


# ---- RotaryEmbedding ----------------------------------------------------------------

B, S, H, D = 2, 5, 3, 10


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rank,interleaved,rot,pos", list(itertools.product([3, 4], [0, 1], [0, 6], [True, False])))
def test_rotary_embedding(device, dtype, rank, interleaved, rot, pos, rng):
    half = (rot or D) // 2
    xs = [B, S, H * D] if rank == 3 else [B, H, S, D]
    max_pos = 11
    cs = [max_pos, half] if pos else [B, S, half]
    attrs = dict(interleaved=interleaved)
    if rot:
        attrs["rotary_embedding_dim"] = rot
    if rank == 3:
        attrs["num_heads"] = H
    names = ["x", "cos", "sin"] + (["pos"] if pos else [])

    def build(dt):
        node = helper.make_node("RotaryEmbedding", names, ["y"], **attrs)
        ins = [("x", dt, xs), ("cos", dt, cs), ("sin", dt, cs)] + ([("pos", np.int64, [B, S])] if pos else [])
        return make_model([node], ins, [("y", dt, xs)], opset=23)

    ang = rng.uniform(-np.pi, np.pi, cs)
    feeds = {"x": rng.standard_normal(xs).astype(np.float32), "cos": np.cos(ang).astype(np.float32),
             "sin": np.sin(ang).astype(np.float32)}
    if pos:
        feeds["pos"] = rng.integers(0, max_pos, (B, S)).astype(np.int64)
    _check(build, feeds, device, dtype)


# ---- SwiGLU -------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("alpha", [None, 0.5, 1.702])
def test_swiglu(device, dtype, alpha, rng):
    shape = [3, 5, 7]

    def build(dt):
        node = helper.make_node("SwiGLU", ["a", "b"], ["y"], **({} if alpha is None else {"alpha": alpha}))
        return make_model([node], [("a", dt, shape), ("b", dt, shape)], [("y", dt, shape)], opset=28)

    feeds = {"a": 3 * rng.standard_normal(shape).astype(np.float32), "b": rng.standard_normal(shape).astype(np.float32)}
    _check(build, feeds, device, dtype)


# ---- CausalConvWithState ----------------------------------------------------------------

def _causal_conv(device, dtype, rng, b, c, length, k, bias, past, act):
    names = ["x", "w", "bias" if bias else "", "past" if past else ""]
    while names[-1] == "":
        names.pop()
    attrs = {} if act is None else {"activation": act}

    def build(dt):
        node = helper.make_node("CausalConvWithState", names, ["y", "present"], **attrs)
        ins = [("x", dt, [b, c, length]), ("w", dt, [c, 1, k])]
        if bias:
            ins.append(("bias", dt, [c]))
        if past:
            ins.append(("past", dt, [b, c, k - 1]))
        return make_model([node], ins, [("y", dt, [b, c, length]), ("present", dt, [b, c, k - 1])], opset=27)

    feeds = {"x": rng.standard_normal((b, c, length)).astype(np.float32),
             "w": rng.standard_normal((c, 1, k)).astype(np.float32)}
    if bias:
        feeds["bias"] = rng.standard_normal(c).astype(np.float32)
    if past:
        feeds["past"] = rng.standard_normal((b, c, k - 1)).astype(np.float32)
    _check(build, feeds, device, dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bias,past,act,k", list(itertools.product([False, True], [False, True], [None, "silu"],
                                                                    [1, 4])))
def test_causal_conv(device, dtype, bias, past, act, k, rng):
    _causal_conv(device, dtype, rng, 2, 5, 7, k, bias, past, act)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("act", ["swish", "none"])
@pytest.mark.parametrize("length", [1, 2])
def test_causal_conv_short_input(device, dtype, act, length, rng):
    """An input shorter than the state (present_state mixes past and input), B = C = 1 and 3."""
    _causal_conv(device, dtype, rng, 1, 1, length, 4, True, True, act)
    _causal_conv(device, dtype, rng, 3, 3, length, 4, False, False, act)


# ---- LinearAttention ----------------------------------------------------------------

def _l2(x, heads):
    b, t, hd = x.shape
    x4 = x.reshape(b, t, heads, hd // heads)
    return (x4 / np.maximum(np.linalg.norm(x4, axis=-1, keepdims=True), 1e-6)).reshape(b, t, hd)


def _linear_attention(device, dtype, rng, rule, hq, hkv, past, decay_per_dim=True, beta_shared=False, scale=None,
                      b=2, t=6, dk=5, dv=7, present=True):
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    names = ["q", "k", "v", "past" if past else "", "decay" if gating else "", "beta" if delta else ""]
    while names[-1] == "":
        names.pop()
    attrs = dict(update_rule=rule, q_num_heads=hq, kv_num_heads=hkv)
    if scale is not None:
        attrs["scale"] = scale
    ds = [b, t, hkv * dk if decay_per_dim else hkv]
    bs = [b, t, 1 if beta_shared else hkv]

    def build(dt):
        node = helper.make_node("LinearAttention", names, ["y", "present"] if present else ["y"], **attrs)
        ins = [("q", dt, [b, t, hq * dk]), ("k", dt, [b, t, hkv * dk]), ("v", dt, [b, t, hkv * dv])]
        if past:
            ins.append(("past", dt, [b, hkv, dk, dv]))
        if gating:
            ins.append(("decay", dt, ds))
        if delta:
            ins.append(("beta", dt, bs))
        outs = [("y", dt, [b, t, hq * dv])] + ([("present", dt, [b, hkv, dk, dv])] if present else [])
        return make_model([node], ins, outs, opset=27)

    k = rng.standard_normal((b, t, hkv * dk)).astype(np.float32)
    feeds = {"q": rng.standard_normal((b, t, hq * dk)).astype(np.float32),
             "k": (_l2(k, hkv) if delta else k).astype(np.float32),
             "v": rng.standard_normal((b, t, hkv * dv)).astype(np.float32)}
    if past:
        feeds["past"] = (0.3 * rng.standard_normal((b, hkv, dk, dv))).astype(np.float32)
    if gating:
        feeds["decay"] = (-0.2 * np.abs(rng.standard_normal(ds))).astype(np.float32)
    if delta:
        feeds["beta"] = rng.uniform(0, 1, bs).astype(np.float32)
    _check(build, feeds, device, dtype, tol=(1e-4, 1e-4) if dtype == np.float32 else None)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rule,heads,past", list(itertools.product(["linear", "gated", "delta", "gated_delta"],
                                                                   [(4, 4), (6, 2), (3, 1)], [False, True])))
def test_linear_attention(device, dtype, rule, heads, past, rng):
    _linear_attention(device, dtype, rng, rule, heads[0], heads[1], past)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rule", ["gated", "gated_delta"])
def test_linear_attention_decay_per_head(device, dtype, rule, rng):
    _linear_attention(device, dtype, rng, rule, 4, 2, True, decay_per_dim=False)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_linear_attention_beta_shared_scale_t1(device, dtype, rng):
    _linear_attention(device, dtype, rng, "delta", 4, 2, True, beta_shared=True, scale=0.25)
    _linear_attention(device, dtype, rng, "gated_delta", 2, 2, False, t=1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rule,past", [("linear", False), ("gated", True), ("gated_delta", True), ("delta", False)])
def test_linear_attention_without_present(device, dtype, rule, past, rng):
    """A node with output 0 only: the state lives in scratch (the CPU kernel
    the simulated device runs takes the node as the CUDA kernel does)."""
    _linear_attention(device, dtype, rng, rule, 4, 2, past, present=False)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bad", [3, -1])
def test_rotary_position_out_of_range(device, bad):
    """A position_ids value outside the cache raises InvalidArgumentError (on the GPU through
    the kernel error flag), and the engine runs again afterwards."""
    node = helper.make_node("RotaryEmbedding", ["x", "c", "s", "p"], ["y"])
    dt = np.float32
    m = make_model([node], [("x", dt, [1, 1, 2, 4]), ("c", dt, [3, 2]), ("s", dt, [3, 2]), ("p", np.int64, [1, 2])],
                   [("y", dt, [1, 1, 2, 4])], opset=23)
    eng = twinfer.load(m, device=device, sim_coverage="cuda", allow_cpu_fallback=False)
    feeds = {"x": np.ones((1, 1, 2, 4), dt), "c": np.ones((3, 2), dt), "s": np.zeros((3, 2), dt)}
    with pytest.raises(twinfer.errors.InvalidArgumentError):
        eng.run({**feeds, "p": np.array([[0, bad]], np.int64)})
    out = eng.run({**feeds, "p": np.array([[0, 2]], np.int64)})
    np.testing.assert_array_equal(out["y"].numpy(), feeds["x"])
