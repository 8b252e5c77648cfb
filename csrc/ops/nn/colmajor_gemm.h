// A row-major GEMM, Y[M, N] = op(A) · op(B), as the column-major BLAS call
// that computes it (cuBLASLt is column-major): Y's bytes read column-major
// are Y^T, and Y^T = op(B)^T · op(A)^T, so the BLAS's first operand is our B
// and its second our A, each with the layout its row-major bytes have when
// read column-major. Host code with no BLAS header, so tests check the
// mapping with NumPy (tests/test_index_math.py) on machines without a GPU.
#pragma once
#include <cstdint>

namespace twinfer::nn {

struct ColMajorOperand {
  bool trans = false;  // the BLAS applies a transpose to it
  int64_t rows = 0, cols = 0, ld = 0;  // its layout as stored, read column-major
};

struct ColMajorGemm {
  int64_t m = 0, n = 0, k = 0;  // D (m x n) = op(X) (m x k) · op(W) (k x n), column-major
  ColMajorOperand x;            // the BLAS's first operand: our B
  ColMajorOperand w;            // the BLAS's second operand: our A
  int64_t ld_d = 0;             // D is Y: rows N, cols M, ld N
};

// Y[M, N] = op(A)[M, K] · op(B)[K, N] with A stored [M, K] ([K, M] when
// trans_a) and B stored [K, N] ([N, K] when trans_b), all row-major, packed.
inline ColMajorGemm colmajor_gemm(int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b) {
  ColMajorGemm g;
  g.m = N;
  g.n = M;
  g.k = K;
  // B stored [K, N] row-major reads column-major as [N, K] = op(B)^T; stored
  // [N, K] it reads as [K, N], which transposed is op(B)^T.
  g.x = trans_b ? ColMajorOperand{true, K, N, K} : ColMajorOperand{false, N, K, N};
  // A stored [M, K] reads as [K, M] = op(A)^T; stored [K, M] it reads as
  // [M, K], which transposed is op(A)^T.
  g.w = trans_a ? ColMajorOperand{true, M, K, M} : ColMajorOperand{false, K, M, K};
  g.ld_d = N;
  return g;
}

}  // namespace twinfer::nn
