// Integer matrix product with zero points, the core of MatMulInteger,
// QLinearMatMul, ConvInteger and QLinearConv:
//
//   Y[b, m, n] = sum_k (A[b, m, k] - za[m]) * (B[b, k, n] - zb[n])    (int32)
//
// A and B are int8 or uint8, row-major, equal rank >= 2 with batch dims
// equal or 1 (broadcast). The raw product A x B runs in a oneDNN int8 matmul
// (u8/s8 x s8 -> s32); oneDNN takes only s8 weights, so a uint8 B is shifted
// to int8 (B - 128, with zb - 128 in its place), and the zero points are
// applied afterwards from row sums of A and column sums of B:
//
//   Y = AB - zb[n] * rowsum(A)[m] - za[m] * colsum(B)[n] + K * za[m] * zb[n]
//
// which holds for zero points of any granularity (per row of A, per column
// of B) and keeps oneDNN's fast path. The arithmetic wraps modulo 2^32 as
// the int32 reference does.
//
// A constant B is reordered once, at construction, into the layout the
// primitive asks for (format_tag::any), so runs skip oneDNN's per-call
// packing of a plain B (MatMulInteger 128x768x3072, 2 threads: 1.29 ms with
// a plain B per run, see benchmarks/quantization.py for the packed figure).
#pragma once
#include <string>
#include <vector>

#include "backends/cpu/onednn_common.h"

namespace twinfer::quant {

struct QGemmDesc {
  Shape a, b;                     // equal rank >= 2
  DType a_type = DType::kUInt8;   // int8 / uint8
  DType b_type = DType::kInt8;
  const void* b_const = nullptr;  // B known when the kernel is built
};

class QGemm {
 public:
  QGemm(const QGemmDesc& d, std::string node, std::string op);
  const Shape& y_shape() const { return y_; }
  int64_t m() const { return m_; }
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  // Scratch run() needs at the start of ctx.scratch (callers put theirs after it).
  size_t scratch_bytes() const { return scratch_; }
  // za: M values (za_per_row) or one; zb: N values (zb_per_col) or one; nullptr = 0.
  void run(const KernelContext& ctx, const void* a, const void* b, const int32_t* za, bool za_per_row,
           const int32_t* zb, bool zb_per_col, int32_t* y) const;

 private:
  struct Variant {
    dnnl::matmul prim;
    dnnl::memory weights;  // packed constant B
    dnnl::memory::desc pad_md;
    size_t pad_bytes = 0;
  };
  Variant make_variant() const;

  QGemmDesc d_;
  std::string node_, op_;
  Shape y_;
  int64_t m_ = 0, n_ = 0, k_ = 0, a_batches_ = 1, b_batches_ = 1, y_batches_ = 1;
  std::vector<int64_t> a_of_y_, b_of_y_;  // batch of A / B feeding each batch of Y
  dnnl::memory::desc a_md_, b_md_, y_md_;
  std::vector<int8_t> b8_;          // constant B as int8 (shifted when uint8), until packed
  bool b_packed_ = false;           // constant B lives in packed_
  mutable cpu::onednn::PackedWeights packed_;
  std::vector<int32_t> b_colsum_;   // its column sums
  bool b_shift_ = false;            // B is uint8: shifted by -128
  size_t pad_declared_ = 0, b8_off_ = 0, zb_off_ = 0, cols_off_ = 0, scratch_ = 0;
  cpu::onednn::ByThreads<Variant> variants_;
};

// Row-major batched shapes of MatMul-style operands: pads A [.., M, K] and
// B [.., K, N] (1-D operands as ONNX MatMul treats them) to one rank.
// Returns false (with *why) when they do not fit.
bool matmul_operand_shapes(const Shape& a, const Shape& b, Shape* a_out, Shape* b_out, Shape* y_onnx,
                           std::string* why);

}  // namespace twinfer::quant
