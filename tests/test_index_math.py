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
