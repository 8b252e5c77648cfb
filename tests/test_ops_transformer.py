"""Transformer, normalisation and new-opset activation ops (csrc/ops/transformer/):
Attention (23/24/25), RMSNormalization, RotaryEmbedding, Swish, SwiGLU,
LinearAttention, CausalConvWithState, Hardmax, LpNormalization,
MeanVarianceNormalization, and the float16/bfloat16 reference MatMul / Gemm.

Each is checked on fresh random data with odd sizes against onnxruntime where
it implements the op at that opset, else the ONNX reference evaluator; plus
bad inputs that must raise twinfer errors naming the node."""

from __future__ import annotations

import numpy as np
import pytest
from op_cases import F16, F32, F64, Const, build, check, expect_error, rand, run
from onnx_helpers import assert_close, run_reference

TOL32 = dict(rtol=1e-4, atol=1e-5)
TOL16 = dict(rtol=2e-3, atol=2e-3)


def ref_check(op, inputs, attrs=None, out=None, opset=17, rtol=1e-5, atol=1e-6):
    """Like check(), but always against the ONNX reference evaluator (for ops and
    opsets onnxruntime does not implement)."""
    model, feeds = build(op, inputs, attrs, out, opset)
    got = run(model, feeds)
    exp = run_reference(model, feeds)
    assert len(got) == len(exp)
    for k, (g, e) in enumerate(zip(got, exp)):
        e = np.asarray(e)
        assert g.dtype == e.dtype, f"{op} output {k}: dtype {g.dtype} != {e.dtype}"
        assert_close(g.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol, what=f"{op} output {k}")
    return got


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


# ----------------------------------------------------------------------------- Attention


def test_attention_4d_mha_and_scale(rng):
    q, k, v = rand(rng, (2, 3, 5, 6), F32), rand(rng, (2, 3, 7, 6), F32), rand(rng, (2, 3, 7, 5), F32)
    check("Attention", [("Q", q), ("K", k), ("V", v)], opset=23, **TOL32)
    check("Attention", [("Q", q), ("K", k), ("V", v)], {"scale": 0.3}, opset=23, **TOL32)


def test_attention_3d_gqa_causal_softcap(rng):
    q, k, v = rand(rng, (2, 5, 6 * 4), F32), rand(rng, (2, 5, 2 * 4), F32), rand(rng, (2, 5, 2 * 3), F32)
    attrs = {"q_num_heads": 6, "kv_num_heads": 2, "is_causal": 1, "softcap": 2.5}
    check("Attention", [("Q", q), ("K", k), ("V", v)], attrs, opset=23, **TOL32)


def test_attention_past_present_masks_and_qk_modes(rng):
    B, Hq, Hkv, Sq, Skv, P, D = 2, 4, 2, 3, 3, 4, 5
    q = rand(rng, (B, Hq, Sq, D), F32)
    k, v = rand(rng, (B, Hkv, Skv, D), F32), rand(rng, (B, Hkv, Skv, D), F32)
    pk, pv = rand(rng, (B, Hkv, P, D), F32), rand(rng, (B, Hkv, P, D), F32)
    fmask = rand(rng, (B, 1, Sq, P + Skv), F32)
    bmask = rng.random((Sq, P + Skv)) < 0.7
    bmask[:, 0] = True
    for mask, causal in [(fmask, 0), (bmask, 1), (fmask[0, 0], 1)]:
        for mode in range(4):
            ins = [("Q", q), ("K", k), ("V", v), ("mask", mask), ("pk", pk), ("pv", pv)]
            attrs = {"is_causal": causal, "qk_matmul_output_mode": mode}
            if mode == 2 and causal:
                # onnxruntime writes float-lowest where ONNX's function body has -inf.
                ref_check("Attention", ins, attrs, out=[F32] * 4, opset=23, rtol=1e-4, atol=1e-5)
            else:
                check("Attention", ins, attrs, out=[F32] * 4, opset=23, **TOL32)


def test_attention_fully_masked_row_is_zero(rng):
    q, k, v = rand(rng, (1, 2, 3, 4), F32), rand(rng, (1, 2, 5, 4), F32), rand(rng, (1, 2, 5, 4), F32)
    mask = np.ones((3, 5), bool)
    mask[1] = False
    y = ref_check("Attention", [("Q", q), ("K", k), ("V", v), ("m", mask)], opset=23, rtol=1e-5, atol=1e-6)[0]
    assert np.all(y[:, :, 1] == 0) and np.all(np.isfinite(y))


def test_attention_nonpad_and_windows(rng):
    q, k, v = rand(rng, (2, 2, 3, 4), F32), rand(rng, (2, 2, 9, 4), F32), rand(rng, (2, 2, 9, 4), F32)
    nonpad = np.array([5, 9], np.int64)
    ref_check("Attention", [("Q", q), ("K", k), ("V", v), ("m", None), ("pk", None), ("pv", None), ("n", nonpad)],
              {"is_causal": 1}, opset=24, rtol=1e-5, atol=1e-6)
    for left, right, causal in [(2, 0, 1), (1, 2, 0), (-1, 1, 0)]:
        ref_check("Attention", [("Q", q), ("K", k), ("V", v)],
                  {"is_causal": causal, "left_window_size": left, "right_window_size": right},
                  opset=25, rtol=1e-5, atol=1e-6)


def test_attention_fp16(rng):
    q, k, v = rand(rng, (1, 3, 4, 8), F16), rand(rng, (1, 3, 6, 8), F16), rand(rng, (1, 3, 6, 8), F16)
    ref_check("Attention", [("Q", q), ("K", k), ("V", v)], {"is_causal": 1}, opset=23, rtol=2e-3, atol=1e-3)


def test_attention_errors(rng):
    import twinfer

    q, k, v = rand(rng, (1, 2, 3, 4), F32), rand(rng, (1, 2, 3, 5), F32), rand(rng, (1, 2, 3, 4), F32)
    expect_error(*build("Attention", [("Q", q), ("K", k), ("V", v)], opset=23), "head sizes")
    q3 = rand(rng, (1, 3, 8), F32)
    expect_error(*build("Attention", [("Q", q3), ("K", q3), ("V", q3)], opset=23), "q_num_heads")
    q4 = rand(rng, (1, 3, 2, 4), F32)
    expect_error(*build("Attention", [("Q", q4), ("K", k[:, :2, :2, :4]), ("V", v[:, :2, :2])], opset=23),
                 "multiple of kv heads")
    kk = rand(rng, (1, 2, 3, 4), F32)
    n = np.array([7], np.int64)
    model, feeds = build("Attention", [("Q", kk), ("K", kk), ("V", kk), ("m", None), ("a", None), ("b", None),
                                       ("n", n)], opset=24)
    expect_error(model, feeds, "nonpad_kv_seqlen", kind=twinfer.Error)


# ----------------------------------------------------------------------------- norms, RoPE, activations


@pytest.mark.parametrize("shape,axis", [((3, 7), -1), ((2, 3, 5), 1), ((2, 3, 4, 5), 0), ((4, 9), 0)])
def test_rms_normalization(rng, shape, axis):
    x = rand(rng, shape, F32)
    s = rand(rng, shape[axis:], F32)
    check("RMSNormalization", [("X", x), ("S", s)], {"axis": axis, "epsilon": 1e-3}, opset=23, **TOL32)


def test_rms_normalization_broadcast_scale_and_fp16(rng):
    x = rand(rng, (2, 3, 5), F32)
    check("RMSNormalization", [("X", x), ("S", rand(rng, (5,), F32))], {"axis": 1}, opset=23, **TOL32)
    xh = rand(rng, (3, 11), F16)
    ref_check("RMSNormalization", [("X", xh), ("S", rand(rng, (11,), F16))], opset=23, **TOL16)


def test_rms_normalization_errors(rng):
    x = rand(rng, (2, 3), F32)
    expect_error(*build("RMSNormalization", [("X", x), ("S", rand(rng, (3,), F32))], {"axis": 2}, opset=23), "axis")
    expect_error(*build("RMSNormalization", [("X", x), ("S", rand(rng, (4,), F32))], opset=23), "scale")


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rot", [0, 4])
def test_rotary_embedding_4d_positions(rng, interleaved, rot):
    B, H, S, D, maxpos = 2, 3, 5, 6, 11
    half = (rot or D) // 2
    x = rand(rng, (B, H, S, D), F32)
    cos, sin = rand(rng, (maxpos, half), F32), rand(rng, (maxpos, half), F32)
    pos = rng.integers(0, maxpos, (B, S)).astype(np.int64)
    ref_check("RotaryEmbedding", [("X", x), ("c", cos), ("s", sin), ("p", pos)],
              {"interleaved": interleaved, "rotary_embedding_dim": rot}, opset=23)


def test_rotary_embedding_3d_no_positions(rng):
    B, S, H, D = 2, 3, 2, 8
    x = rand(rng, (B, S, H * D), F32)
    cos, sin = rand(rng, (B, S, D // 2), F32), rand(rng, (B, S, D // 2), F32)
    ref_check("RotaryEmbedding", [("X", x), ("c", cos), ("s", sin)], {"num_heads": H}, opset=23)


def test_rotary_embedding_bad_position(rng):
    import twinfer

    x = rand(rng, (1, 1, 2, 4), F32)
    cos = rand(rng, (3, 2), F32)
    pos = np.array([[0, 3]], np.int64)
    model, feeds = build("RotaryEmbedding", [("X", x), ("c", cos), ("s", cos), ("p", pos)], opset=23)
    expect_error(model, feeds, "position_ids", kind=twinfer.Error)


def test_swish_and_swiglu(rng):
    x = rand(rng, (3, 17), F32)
    check("Swish", [("X", x)], {"alpha": 1.7}, opset=24, **TOL32)
    a, b = rand(rng, (4, 9), F32), rand(rng, (4, 9), F32)
    ref_check("SwiGLU", [("A", a), ("B", b)], {"alpha": 0.8}, opset=28)
    ah, bh = rand(rng, (5, 3), F16), rand(rng, (5, 3), F16)
    ref_check("SwiGLU", [("A", ah), ("B", bh)], opset=28, **TOL16)
    expect_error(*build("SwiGLU", [("A", a), ("B", b[:, :5])], opset=28), "one shape")


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_hardmax(rng, axis):
    x = rand(rng, (3, 4, 5), F32)
    x[0, 0, :2] = 9.0  # a tie: the first maximum wins
    check("Hardmax", [("X", x)], {"axis": axis}, opset=13)
    check("Hardmax", [("X", x)], {"axis": axis}, opset=11)


@pytest.mark.parametrize("p", [1, 2])
def test_lp_normalization(rng, p):
    x = rand(rng, (3, 5, 4), F32)
    x[1, :, 2] = 0  # zero norm gives zeros
    for axis in (1, -1):
        check("LpNormalization", [("X", x)], {"axis": axis, "p": p}, opset=22, **TOL32)
    expect_error(*build("LpNormalization", [("X", x)], {"p": 3}, opset=22), "p must be 1 or 2")


def test_mean_variance_normalization(rng):
    # The kernel sees x as rows of a run of the trailing reduced dims: runs of
    # 20 (the default axes), of 5, of 1 (the last dim kept), the whole tensor.
    x = rand(rng, (2, 3, 4, 5), F32)
    check("MeanVarianceNormalization", [("X", x)], opset=13, **TOL32)
    for axes in ([1, 3], [0, 1], [2], [0, 1, 2, 3], [-1], [0, 2]):
        check("MeanVarianceNormalization", [("X", x)], {"axes": axes}, opset=13, **TOL32)
    # float64 against NumPy: the op's function body (onnxruntime's and the
    # reference evaluator's) adds a float32 epsilon, which float64 refuses.
    x = rand(rng, (3, 7, 11), F64)
    (got,) = run(*build("MeanVarianceNormalization", [("X", x)], {"axes": [0, 2]}, opset=13))
    mean = x.mean(axis=(0, 2), keepdims=True)
    want = (x - mean) / (np.sqrt(((x - mean) ** 2).mean(axis=(0, 2), keepdims=True)) + 1e-9)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("axes", [None, [1], [0, 1, 3], [3]])
def test_mean_variance_normalization_float32_rows_on_threads(rng, axes):
    # Runs long enough for the float32 rows' eight double lanes and their
    # tails (1073, 29, 1), groups spread over rows, one and two threads: each
    # within float32's rounding of the float64 result, and the same bits for
    # any thread count (per-row sums are added into groups in row order).
    x = rand(rng, (3, 13, 37, 29), F32) * 3 + 1
    x[1, 4, 5, 6] = 40.0  # an outlier its group's statistics must take
    model, feeds = build("MeanVarianceNormalization", [("X", x)], None if axes is None else {"axes": axes}, opset=13)
    one = run(model, feeds, num_threads=1)[0]
    two = run(model, feeds, num_threads=2)[0]
    ax = tuple(axes or (0, 2, 3))
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=ax, keepdims=True)
    want = (x64 - mean) / (np.sqrt(((x64 - mean) ** 2).mean(axis=ax, keepdims=True)) + 1e-9)
    np.testing.assert_allclose(one, want, rtol=2e-7, atol=2e-7)
    assert np.array_equal(one, two)


# ----------------------------------------------------------------------------- recurrent attention / conv


@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
def test_linear_attention(rng, rule):
    B, T, Hq, Hkv, dk, dv = 2, 5, 4, 2, 3, 5
    q, k = rand(rng, (B, T, Hq * dk), F32), rand(rng, (B, T, Hkv * dk), F32) * 0.5
    v = rand(rng, (B, T, Hkv * dv), F32)
    past = rand(rng, (B, Hkv, dk, dv), F32)
    decay = -np.abs(rand(rng, (B, T, Hkv * dk if rule == "gated" else Hkv), F32))
    beta = 1 / (1 + np.exp(-rand(rng, (B, T, Hkv), F32)))
    ins = [("q", q), ("k", k), ("v", v), ("past", past),
           ("g", decay if "gated" in rule else None), ("b", beta if "delta" in rule else None)]
    ref_check("LinearAttention", ins, {"update_rule": rule, "q_num_heads": Hq, "kv_num_heads": Hkv},
              out=[F32, F32], opset=27, rtol=1e-4, atol=1e-5)


def _linear_attention_numpy(q, k, v, past, decay, beta, rule, hq, hkv, scale=None):
    """The recurrence of the op's definition, token by token in float64: per kv
    head a state S [d_k, d_v]; gated rules first decay S by exp(g) (per head or
    per key dim), delta rules replace v by beta (v - S^T k); then S += k v^T and
    every query head of the group reads o = scale q^T S. Returns (y, present)."""
    b, t, _ = q.shape
    dk, dv = q.shape[2] // hq, v.shape[2] // hkv
    group = hq // hkv
    scale = scale or 1 / np.sqrt(dk)
    q4 = q.astype(np.float64).reshape(b, t, hq, dk)
    k4 = k.astype(np.float64).reshape(b, t, hkv, dk)
    v4 = v.astype(np.float64).reshape(b, t, hkv, dv)
    state = np.zeros((b, hkv, dk, dv)) if past is None else past.astype(np.float64).copy()
    y = np.zeros((b, t, hq, dv))
    for n in range(b):
        for h in range(hkv):
            st = state[n, h]
            for i in range(t):
                kt, vt = k4[n, i, h], v4[n, i, h]
                if rule in ("gated", "gated_delta"):
                    g = decay[n, i].astype(np.float64)
                    st = (np.exp(g[h * dk:(h + 1) * dk])[:, None] if g.size == hkv * dk else np.exp(g[h])) * st
                if rule in ("delta", "gated_delta"):
                    bt = float(beta[n, i, h if beta.shape[-1] == hkv else 0])
                    vt = bt * (vt - st.T @ kt)
                st = st + np.outer(kt, vt)
                for j in range(group):
                    y[n, i, h * group + j] = scale * (q4[n, i, h * group + j] @ st)
            state[n, h] = st
    return y.reshape(b, t, hq * dv), state


@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
@pytest.mark.parametrize("past", [True, False])
def test_linear_attention_without_present_state(rng, rule, past):
    """present_state is optional: a node with output 0 only (CUDA has always
    taken it) gives the same output as the node with both, and as the NumPy
    recurrence."""
    B, T, Hq, Hkv, dk, dv = 2, 5, 6, 2, 3, 4
    gating, delta = "gated" in rule, "delta" in rule
    q, k = rand(rng, (B, T, Hq * dk), F32), rand(rng, (B, T, Hkv * dk), F32) * 0.5
    v = rand(rng, (B, T, Hkv * dv), F32)
    st = rand(rng, (B, Hkv, dk, dv), F32) if past else None
    decay = -np.abs(rand(rng, (B, T, Hkv * dk if rule == "gated" else Hkv), F32)) if gating else None
    beta = (1 / (1 + np.exp(-rand(rng, (B, T, 1 if rule == "delta" else Hkv), F32)))).astype(F32) if delta else None
    ins = [("q", q), ("k", k), ("v", v), ("past", st), ("g", decay), ("b", beta)]
    attrs = {"update_rule": rule, "q_num_heads": Hq, "kv_num_heads": Hkv}
    one = run(*build("LinearAttention", ins, attrs, out=[F32], opset=27))
    two = run(*build("LinearAttention", ins, attrs, out=[F32, F32], opset=27))
    assert len(one) == 1 and len(two) == 2
    np.testing.assert_array_equal(one[0], two[0])
    y, present = _linear_attention_numpy(q, k, v, st, decay, beta, rule, Hq, Hkv)
    assert_close(one[0].astype(np.float64), y, rtol=1e-4, atol=1e-5, what="LinearAttention y")
    assert_close(two[1].astype(np.float64), present, rtol=1e-4, atol=1e-5, what="LinearAttention present")


def test_linear_attention_without_present_state_float16_float32_past(rng):
    """float16 activations with a float32 past_state and no present_state
    output: the state keeps past_state's dtype (float32 in the kernel)."""
    B, T, H, dk, dv = 1, 4, 2, 5, 3
    q, k, v = (rand(rng, (B, T, H * d), F16) for d in (dk, dk, dv))
    st = rand(rng, (B, H, dk, dv), F32)
    decay = (-np.abs(rand(rng, (B, T, H), F32))).astype(F16)
    beta = (1 / (1 + np.exp(-rand(rng, (B, T, H), F32)))).astype(F16)
    ins = [("q", q), ("k", k), ("v", v), ("past", st), ("g", decay), ("b", beta)]
    attrs = {"update_rule": "gated_delta", "q_num_heads": H, "kv_num_heads": H, "scale": 0.7}
    one = run(*build("LinearAttention", ins, attrs, out=[F16], opset=27))
    two = run(*build("LinearAttention", ins, attrs, out=[F16, F32], opset=27))
    assert one[0].dtype == F16 and two[1].dtype == F32
    np.testing.assert_array_equal(one[0], two[0])
    y, _ = _linear_attention_numpy(q, k, v, st, decay, beta, "gated_delta", H, H, scale=0.7)
    assert_close(one[0].astype(np.float64), y, rtol=5e-3, atol=5e-3, what="LinearAttention y")


def test_linear_attention_errors(rng):
    q = rand(rng, (1, 2, 4), F32)
    expect_error(*build("LinearAttention", [("q", q), ("k", q), ("v", q)],
                        {"update_rule": "gated", "q_num_heads": 2, "kv_num_heads": 2}, out=[F32, F32], opset=27),
                 "decay")
    expect_error(*build("LinearAttention", [("q", q), ("k", q), ("v", q)],
                        {"update_rule": "linear", "q_num_heads": 3, "kv_num_heads": 2}, out=[F32, F32], opset=27),
                 "multiple")


@pytest.mark.parametrize("past,bias,act", [(False, False, "none"), (True, True, "silu"), (True, False, "swish")])
def test_causal_conv_with_state(rng, past, bias, act):
    B, C, L, K = 2, 5, 7, 4
    ins = [("x", rand(rng, (B, C, L), F32)), ("w", rand(rng, (C, 1, K), F32)),
           ("b", rand(rng, (C,), F32) if bias else None), ("s", rand(rng, (B, C, K - 1), F32) if past else None)]
    ref_check("CausalConvWithState", ins, {"activation": act}, out=[F32, F32], opset=27)


def test_causal_conv_short_input_and_errors(rng):
    ins = [("x", rand(rng, (1, 3, 2), F32)), ("w", rand(rng, (3, 1, 5), F32)), ("b", None),
           ("s", rand(rng, (1, 3, 4), F32))]
    ref_check("CausalConvWithState", ins, out=[F32, F32], opset=27)
    bad = [("x", rand(rng, (1, 3, 2), F32)), ("w", rand(rng, (4, 1, 5), F32))]
    expect_error(*build("CausalConvWithState", bad, out=[F32, F32], opset=27), "weight")


# ----------------------------------------------------------------------------- 16-bit MatMul / Gemm


@pytest.mark.parametrize("dt", [F16, F64])
def test_matmul_gemm_other_floats(rng, dt):
    tol = TOL16 if dt == F16 else dict(rtol=1e-10, atol=1e-10)
    a, b = rand(rng, (2, 3, 7), dt), rand(rng, (7, 5), dt)
    check("MatMul", [("A", a), ("B", b)], opset=13, **tol)
    c = rand(rng, (5,), dt)
    check("Gemm", [("A", a[0]), ("B", b), ("C", c)], {"alpha": 0.5, "beta": 2.0}, opset=13, **tol)


def test_matmul_bfloat16(rng):
    import onnx

    a, b = rand(rng, (3, 9), F32), rand(rng, (9, 4), F32)
    nodes = [onnx.helper.make_node("Cast", ["a"], ["ab"], to=onnx.TensorProto.BFLOAT16),
             onnx.helper.make_node("Cast", ["b"], ["bb"], to=onnx.TensorProto.BFLOAT16),
             onnx.helper.make_node("MatMul", ["ab", "bb"], ["yb"]),
             onnx.helper.make_node("Cast", ["yb"], ["y"], to=onnx.TensorProto.FLOAT)]
    from onnx_helpers import make_model, run_twinfer

    model = make_model(nodes, [("a", F32, a.shape), ("b", F32, b.shape)], [("y", F32, None)], opset=13)
    got = run_twinfer(model, {"a": a, "b": b}, optimize=False)[0]
    exp = run_reference(model, {"a": a, "b": b})[0]
    assert_close(got, exp, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("scale_shape", [(2, 5, 16), (5, 1), (2, 1, 16), (1, 16)])
def test_rms_norm_scale_broadcast_over_x(scale_shape):
    # Torch's exporter writes F.rms_norm without a weight as a scale of ones
    # shaped like X ("has more dims than the normalised shape" before); a
    # scale with dims over the leading axes scales each row by its own values.
    import onnxruntime as ort
    from onnx import TensorProto as TP
    from onnx import helper

    import twinfer

    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 5, 16)).astype(np.float32)
    s = rng.standard_normal(scale_shape).astype(np.float32)
    vi = helper.make_tensor_value_info
    g = helper.make_graph([helper.make_node("RMSNormalization", ["x", "s"], ["y"], axis=-1, epsilon=1e-5)], "g",
                          [vi("x", TP.FLOAT, list(x.shape)), vi("s", TP.FLOAT, list(scale_shape))],
                          [vi("y", TP.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    want = x / np.sqrt(np.mean(x.astype(np.float64) ** 2, axis=-1, keepdims=True) + 1e-5) * s
    got = twinfer.load(m).run({"x": x, "s": s})["y"].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    ours_vs_ort = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x, "s": s})[0]
    np.testing.assert_allclose(got, ours_vs_ort, rtol=1e-5, atol=1e-6)
