"""The host side of the device index math (csrc/ops/elementwise/offset_calc.h):
the fast division and the broadcast offsets CUDA kernels compute, checked
against Python's integers and NumPy's broadcasting on random shapes."""

import numpy as np
import pytest

from twinfer import _core


def test_fast_divmod_matches_integer_division(rng):
    # Divisors: small, powers of two and their neighbours, primes, large dims.
    special = [1, 2, 3, 7, 31, 32, 33, 1023, 1024, 1025, 65535, 65536, 65537, (1 << 31) - 1, 1 << 31,
               (1 << 31) + 1, (1 << 40) + 7, (1 << 47) - 1]
    divisors = special + [int(d) for d in rng.integers(1, 1 << 47, size=300)] + \
        [int(d) for d in rng.integers(1, 4096, size=300)]
    rows_d, rows_n = [], []
    for d in divisors:
        # Numerators up to 2^62 (element counts stay below 2^47; the math holds below 2^63).
        ns = [0, 1, d - 1, d, d + 1, 2 * d - 1, (1 << 62) - 1, (1 << 47) - 1] + \
             [int(x) for x in rng.integers(0, 1 << 62, size=20, dtype=np.int64)]
        rows_d += [d] * len(ns)
        rows_n += ns
    got = _core._test_fast_divmod(rows_d, rows_n)
    want = [(n // d, n % d) for d, n in zip(rows_d, rows_n)]
    bad = [(d, n, g, w) for d, n, g, w in zip(rows_d, rows_n, got, want) if tuple(g) != w]
    assert not bad, f"{len(bad)} wrong divisions, first: divisor, n, got, want = {bad[0]}"


def _random_broadcast_case(rng):
    rank = int(rng.integers(0, 6))
    out = [int(d) for d in rng.choice([1, 2, 3, 5, 7, 33], size=rank)]
    shapes = []
    for _ in range(int(rng.integers(1, 4))):
        drop = int(rng.integers(0, rank + 1))  # fewer leading dims
        s = [d if rng.random() < 0.6 else 1 for d in out[drop:]]
        shapes.append(s)
    return shapes, out


@pytest.mark.parametrize("case", range(60))
def test_broadcast_offsets_match_numpy(rng, case):
    shapes, out = _random_broadcast_case(rng)
    total = int(np.prod(out)) if out else 1
    linear = list(range(total))
    rank, got = _core._test_broadcast_offsets(shapes, out, linear)
    assert 1 <= rank <= 8
    got = np.array(got, dtype=np.int64).reshape(total, len(shapes))
    for k, s in enumerate(shapes):
        # The element of input k that NumPy's broadcasting puts at each output position.
        flat = np.arange(int(np.prod(s)) if s else 1, dtype=np.int64).reshape(s)
        want = np.broadcast_to(flat, out).reshape(-1)
        np.testing.assert_array_equal(got[:, k], want, err_msg=f"input {k} {s} -> {out}")


def test_broadcast_offsets_merge_dims():
    # [N,C,H,W] + [C,1,1]: H*W merges into one run; 2 dims remain after dropping N=1.
    rank, _ = _core._test_broadcast_offsets([[1, 4, 5, 6], [4, 1, 1]], [1, 4, 5, 6], [0])
    assert rank == 2
    # Same shapes collapse to one flat run.
    rank, _ = _core._test_broadcast_offsets([[3, 4, 5], [3, 4, 5]], [3, 4, 5], [0])
    assert rank == 1


def test_broadcast_offsets_large_dims_use_64_bit_offsets():
    # 2^31 + 3 elements in the inner dim: offsets past 2^31 stay exact.
    n = (1 << 31) + 3
    rank, got = _core._test_broadcast_offsets([[2, n], [n]], [2, n], [n - 1, n, 2 * n - 1])
    assert [list(g) for g in got] == [[n - 1, n - 1], [n, 0], [2 * n - 1, n - 1]]


def test_empty_broadcasts_do_not_divide_by_zero():
    # A size-0 dim (an empty batch plus a bias): nothing to index, no crash.
    rank, offsets = _core._test_broadcast_offsets([[0, 3], [3]], [0, 3], [])
    assert rank == 1 and offsets == []
    assert _core._test_fast_divmod([0], [5]) == [(5, 0)]  # a zero divisor counts as 1


def test_launch_config_covers_every_element():
    from twinfer import _core as c

    for n, threads, blocks in c._test_launch_configs([0, 1, 255, 256, 257, 1 << 20, (1 << 31) + 3, 1 << 40]):
        if n == 0:
            assert blocks == 0
            continue
        assert 0 < threads <= 1024 and threads % 32 == 0
        assert 0 < blocks <= (1 << 31) - 1
        # One element per thread while that fits, a bounded grid after (the loop strides).
        assert blocks == min((n + threads - 1) // threads, 1 << 20)


def _colmajor(buf, rows, cols, ld):
    """The matrix a column-major BLAS sees in `buf` (element [i, j] at i + j*ld)."""
    idx = np.arange(rows)[:, None] + np.arange(cols)[None, :] * ld
    return buf[idx]


@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
def test_row_major_gemm_as_a_column_major_blas_call(rng, trans_a, trans_b):
    # What the CUDA GEMM asks cuBLASLt for (ops/nn/colmajor_gemm.h), played by
    # a column-major BLAS written in NumPy, must be the row-major product.
    for M, N, K in [(1, 1, 1), (3, 5, 7), (33, 1, 17), (1, 64, 9), (12, 7, 1)]:
        A = rng.standard_normal((K, M) if trans_a else (M, K))
        B = rng.standard_normal((N, K) if trans_b else (K, N))
        m, n, k, x, w, ld_d = _core._test_colmajor_gemm(M, N, K, trans_a, trans_b)
        X = _colmajor(B.reshape(-1), x[1], x[2], x[3])  # the BLAS's first operand is B's bytes
        W = _colmajor(A.reshape(-1), w[1], w[2], w[3])
        X = X.T if x[0] else X
        W = W.T if w[0] else W
        assert X.shape == (m, k) and W.shape == (k, n)
        D = X @ W
        out = np.zeros(ld_d * n)
        for j in range(n):
            out[j * ld_d: j * ld_d + m] = D[:, j]
        want = (A.T if trans_a else A) @ (B.T if trans_b else B)
        np.testing.assert_allclose(out.reshape(M, N), want, rtol=1e-12, atol=1e-12)


# -- arithmetic the CUDA kernels share with the host --------------------------------
ACTIVATIONS = {  # name, params, NumPy reference
    "": ([], lambda x: x),
    "Relu": ([], lambda x: np.maximum(x, 0)),
    "LeakyRelu": ([0.07], lambda x: np.where(x >= 0, x, 0.07 * x)),
    "Clip": ([-0.5, 1.25], lambda x: np.clip(x, -0.5, 1.25)),
    "Sigmoid": ([], lambda x: 1 / (1 + np.exp(-x))),
    "HardSigmoid": ([0.3, 0.4], lambda x: np.clip(0.3 * x + 0.4, 0, 1)),
    "HardSwish": ([], lambda x: x * np.clip(x / 6 + 0.5, 0, 1)),
    "Silu": ([], lambda x: x / (1 + np.exp(-x))),
    "Gelu": ([], None),
    "Tanh": ([], np.tanh),
}


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_device_activation_functor_matches_numpy(rng, name):
    import math

    params, ref = ACTIVATIONS[name]
    if name == "Gelu":
        erf = np.vectorize(math.erf)
        ref = lambda x: 0.5 * x * (1 + erf(x / np.sqrt(2)))  # noqa: E731
    x = np.concatenate([rng.standard_normal(500) * 4, [0.0, -0.0, 1e-8, -30, 30]]).astype(np.float32)
    got = np.array(_core._test_activation(name, params, x.tolist()), np.float32)
    np.testing.assert_allclose(got, ref(x.astype(np.float64)), rtol=2e-6, atol=2e-6)
    tanh_gelu = np.array(_core._test_activation("Gelu", [1.0], x.tolist()), np.float32)
    want = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x.astype(np.float64) ** 3)))
    np.testing.assert_allclose(tanh_gelu, want, rtol=2e-6, atol=2e-6)


def _quantize_ref(v, y_scale, y_zero, unsigned):
    lo, hi = (0, 255) if unsigned else (-128, 127)
    return np.clip(np.rint(v.astype(np.float32) / np.float32(y_scale)) + y_zero, lo, hi).astype(np.int64)


@pytest.mark.parametrize("quantized", [False, True])
def test_int8_epilogue_matches_numpy(rng, quantized):
    rows, n, k = 7, 13, 21
    x = rng.integers(0, 256, size=(rows, k))                       # uint8 activations
    w = rng.integers(-128, 128, size=(k, n))                       # int8 weights
    x_zero = 131
    acc = x @ w                                                    # what the GEMM sums (x as stored)
    scale = (rng.random(n) * 0.01 + 1e-4).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    colsum = w.sum(0)
    y_scale, y_zero = (0.05, 3) if quantized else (0.0, 0)
    got = np.array(_core._test_qlinear_epilogue(acc.ravel().tolist(), n, scale.tolist(), bias.tolist(),
                                                colsum.tolist(), x_zero, "Relu", [], y_scale, y_zero, False))
    want = np.maximum(((x - x_zero) @ w).astype(np.float32) * scale + bias, 0).ravel()
    if quantized:
        want = _quantize_ref(want, y_scale, y_zero, False)
        assert np.abs(got - want).max() <= 1 and np.mean(got == want) > 0.99
    else:
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)
    # The same with the shift the GPU applies to uint8 (x - 128 as int8, zero point less 128).
    shifted = np.array(_core._test_qlinear_epilogue(((x - 128) @ w).ravel().tolist(), n, scale.tolist(),
                                                    bias.tolist(), colsum.tolist(), x_zero - 128, "Relu", [],
                                                    y_scale, y_zero, False))
    np.testing.assert_array_equal(shifted, got)


@pytest.mark.parametrize("mul", [False, True])
def test_qbinary_element_matches_the_qdq_graph(rng, mul):
    a = rng.integers(0, 256, size=4000)
    b = rng.integers(-128, 128, size=4000)
    sa, za, sb, zb, sy, zy = 0.02, 120, 0.013, -3, 0.04 if not mul else 0.0009, 7
    for relu in (False, True):
        got = np.array(_core._test_qbinary(a.tolist(), b.tolist(), sa, za, sb, zb, sy, zy, True, mul, relu))
        fa = (a - za).astype(np.float32) * np.float32(sa)
        fb = (b - zb).astype(np.float32) * np.float32(sb)
        r = fa * fb if mul else fa + fb
        if relu:
            r = np.maximum(r, 0)
        np.testing.assert_array_equal(got, _quantize_ref(r, sy, zy, True))


@pytest.mark.parametrize("bits32", [False, True])  # the int32_t index math of fits_32_bits geometries too
@pytest.mark.parametrize("x_last,y_last,group,taps_last,rows", [
    (False, False, 1, False, False), (True, True, 1, False, False), (False, True, 3, False, False),
    (True, True, 1, True, False), (True, False, 3, True, False),
    (False, False, 1, False, True), (True, True, 1, False, True), (False, True, 3, False, True)])
def test_int8_conv_geometry_matches_numpy_im2col(rng, x_last, y_last, group, taps_last, rows, bits32):
    # taps_last: K ordered (i, j, c), an NHWC x's channels one run per tap
    # (the im2col kernel copies them 16 bytes at a time); rows: the weights'
    # own order walked by rows of KW taps (the kernel for NCHW x, the stem's).
    B, C, H, W, O = 2, 6, 9, 11, 9
    KH, KW, SH, SW, PH, PW, DH, DW = 3, 2, 2, 1, 1, 2, 2, 1
    OH = (H + 2 * PH - DH * (KH - 1) - 1) // SH + 1
    OW = (W + 2 * PW - DW * (KW - 1) - 1) // SW + 1
    x = rng.integers(-128, 128, size=(B, C, H, W))
    stored = x.transpose(0, 2, 3, 1).ravel() if x_last else x.ravel()
    per = C // group
    for g in range(group):
        cols, yoff = _core._test_conv_geometry([B, C, H, W], [O, OH, OW], [KH, KW, SH, SW, PH, PW, DH, DW], group,
                                               x_last, y_last, g, bits32, taps_last, rows)
        cols = np.array(cols)
        got = np.where(cols < 0, 999, stored[np.maximum(cols, 0)])  # 999: the padding
        padded = np.pad(x[:, g * per:(g + 1) * per], ((0, 0), (0, 0), (PH, PH), (PW, PW)), constant_values=999)
        want = np.empty((B, OH, OW, per, KH, KW), np.int64)
        for i in range(KH):
            for j in range(KW):
                win = padded[:, :, i * DH: i * DH + SH * (OH - 1) + 1: SH, j * DW: j * DW + SW * (OW - 1) + 1: SW]
                want[:, :, :, :, i, j] = win.transpose(0, 2, 3, 1)
        if taps_last:
            want = want.transpose(0, 1, 2, 4, 5, 3)
        np.testing.assert_array_equal(got, want.reshape(B * OH * OW, per * KH * KW))
    y = np.arange(B * O * OH * OW).reshape(B, O, OH, OW)
    y_stored = y.transpose(0, 2, 3, 1).ravel() if y_last else y.ravel()
    np.testing.assert_array_equal(y_stored[np.array(yoff)], y.transpose(0, 2, 3, 1).reshape(B * OH * OW, O))


@pytest.mark.parametrize("o,c,group,kh,kw", [(5, 6, 1, 3, 2), (6, 6, 3, 3, 3), (4, 16, 1, 1, 1)])
def test_int8_weights_reordered_for_channels_last_taps(rng, o, c, group, kh, kw):
    # [O, C/g, KH, KW] -> [O, KH, KW, C/g]: with cols in the taps_last order,
    # cols @ w.T is the same convolution.
    w = rng.integers(-128, 128, size=(o, c // group, kh, kw)).astype(np.int8)
    got = np.array(_core._test_weights_taps_last(w.ravel().tolist(), o, c, group, kh, kw), np.int8)
    np.testing.assert_array_equal(got, w.transpose(0, 2, 3, 1).ravel())
