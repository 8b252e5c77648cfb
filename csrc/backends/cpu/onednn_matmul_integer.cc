// MatMulInteger and QLinearMatMul: the integer product in QGemm (oneDNN int8
// matmul plus zero point corrections), then for QLinearMatMul the
// requantization as the ONNX reference does it:
//   y = clip(round_half_even(C * (a_scale * b_scale / y_scale) + y_zero_point))
// with the multiplier computed in the scales' type (float16 / bfloat16 steps
// round to it) and the rest in double. Zero points and scales of A are per
// tensor or per row ([M]), those of B and y per tensor or per column ([N]).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>

#include "backends/cpu/onednn_qgemm.h"
#include "core/parallel.h"
#include "ops/quant/quant_util.h"
#include "ops/quant/requantize_rows.h"

namespace twinfer::quant {
namespace {

// Reads the zero point / scale granularity of an operand: one element, or
// `len` elements (per row / column). Returns true for per-row/column.
template <typename Ctx>
bool per_slice(const Ctx& c, const Shape& s, int64_t len, const std::string& what, const char* slice) {
  const int64_t n = shape_numel(s);
  if (n == 1) return false;
  if (n == len && (s.size() == 1 || static_cast<int64_t>(s.back()) == len)) return true;
  c.fail(ErrorKind::kShape, what + " has shape " + shape_str(s) + "; it must have one element or " +
                                std::to_string(len) + " (one per " + slice + ")");
}

// ---- MatMulInteger ---------------------------------------------------------------

std::unique_ptr<QGemm> make_gemm(const KernelBuildInfo& info, size_t ia, size_t ib) {
  Shape a, b, y;
  std::string why;
  if (!matmul_operand_shapes(info.input_shape(ia), info.input_shape(ib), &a, &b, &y, &why))
    info.fail(ErrorKind::kShape, why);
  QGemmDesc d;
  d.a = a;
  d.b = b;
  d.a_type = info.input_dtype(ia);
  d.b_type = info.input_dtype(ib);
  if (const Tensor* t = info.input_constant(ib)) d.b_const = t->data();
  return std::make_unique<QGemm>(d, info.node().name, info.node().op_type);
}

class MatMulIntegerKernel final : public Kernel {
 public:
  explicit MatMulIntegerKernel(const KernelBuildInfo& info) : gemm_(make_gemm(info, 0, 1)) {
    if (info.has_input(2)) za_row_ = per_slice(info, info.input_shape(2), gemm_->m(), "a_zero_point", "row of A");
    if (info.has_input(3)) zb_col_ = per_slice(info, info.input_shape(3), gemm_->n(), "b_zero_point", "column of B");
    zero_n_ = std::max(gemm_->m(), gemm_->n());
  }
  size_t scratch_bytes() const override {
    return gemm_->scratch_bytes() + 2 * static_cast<size_t>(zero_n_) * sizeof(int32_t);
  }
  const char* impl_name() const override { return "onednn int8 matmul"; }

  void run(KernelContext& ctx) const override {
    int32_t* za = reinterpret_cast<int32_t*>(static_cast<char*>(ctx.scratch) + gemm_->scratch_bytes());
    int32_t* zb = za + zero_n_;
    const bool has_a = ctx.inputs.size() > 2 && ctx.inputs[2].data;
    const bool has_b = ctx.inputs.size() > 3 && ctx.inputs[3].data;
    if (has_a) load_int32s(ctx.inputs[2], za);
    if (has_b) load_int32s(ctx.inputs[3], zb);
    gemm_->run(ctx, ctx.inputs[0].data, ctx.inputs[1].data, has_a ? za : nullptr, za_row_, has_b ? zb : nullptr,
               zb_col_, ctx.outputs[0].as<int32_t>());
  }

 private:
  std::unique_ptr<QGemm> gemm_;
  bool za_row_ = false, zb_col_ = false;
  int64_t zero_n_ = 1;
};

// ---- QLinearMatMul -------------------------------------------------------------------
// Inputs: a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point.

class QLinearMatMulKernel final : public Kernel {
 public:
  explicit QLinearMatMulKernel(const KernelBuildInfo& info)
      : gemm_(make_gemm(info, 0, 3)), out_(info.input_dtype(7)), st_(info.input_dtype(1)) {
    const int64_t m = gemm_->m(), n = gemm_->n();
    a_row_ = per_slice(info, info.input_shape(1), m, "a_scale", "row of A");
    if (per_slice(info, info.input_shape(2), m, "a_zero_point", "row of A") != a_row_)
      info.fail(ErrorKind::kShape, "a_scale and a_zero_point must have the same number of elements");
    b_col_ = per_slice(info, info.input_shape(4), n, "b_scale", "column of B");
    if (per_slice(info, info.input_shape(5), n, "b_zero_point", "column of B") != b_col_)
      info.fail(ErrorKind::kShape, "b_scale and b_zero_point must have the same number of elements");
    y_col_ = per_slice(info, info.input_shape(6), n, "y_scale", "column of B");
    if (per_slice(info, info.input_shape(7), n, "y_zero_point", "column of B") != y_col_)
      info.fail(ErrorKind::kShape, "y_scale and y_zero_point must have the same number of elements");
    if (info.input_dtype(4) != st_ || info.input_dtype(6) != st_)
      info.fail(ErrorKind::kDType, "a_scale, b_scale and y_scale must have one dtype");
    quant_int_range(out_, &lo_, &hi_);
    vec_n_ = std::max(m, n);
    y_n_ = shape_numel(gemm_->y_shape());
  }

  size_t scratch_bytes() const override {
    // c, six vectors (zero points, scales), the multipliers (one row's or
    // every row's) and the zero points as double
    const int64_t m = gemm_->m(), n = gemm_->n();
    return gemm_->scratch_bytes() + static_cast<size_t>(y_n_) * sizeof(int32_t) +
           6 * static_cast<size_t>(vec_n_) * sizeof(int32_t) +
           static_cast<size_t>((a_row_ ? m : 1) * n) * sizeof(float) + sizeof(double) +
           static_cast<size_t>(n) * sizeof(double);
  }
  const char* impl_name() const override { return "onednn int8 matmul"; }

  void run(KernelContext& ctx) const override {
    char* base = static_cast<char*>(ctx.scratch) + gemm_->scratch_bytes();
    int32_t* c = reinterpret_cast<int32_t*>(base);
    int32_t* za = c + y_n_;
    int32_t* zb = za + vec_n_;
    int32_t* zy = zb + vec_n_;
    float* sa = reinterpret_cast<float*>(zy + vec_n_);
    float* sb = sa + vec_n_;
    float* sy = sb + vec_n_;
    load_int32s(ctx.inputs[2], za);
    load_int32s(ctx.inputs[5], zb);
    load_int32s(ctx.inputs[7], zy);
    load_floats(ctx.inputs[1], sa);
    load_floats(ctx.inputs[4], sb);
    load_floats(ctx.inputs[6], sy);
    gemm_->run(ctx, ctx.inputs[0].data, ctx.inputs[3].data, za, a_row_, zb, b_col_, c);
    const int64_t m = gemm_->m(), n = gemm_->n();
    // Per column of a row: the multiplier, rounded in the scales' type as
    // the reference computes it, and y's zero point. A's scale per row makes
    // the multipliers per row too; else one set serves every row.
    float* mult_all = sy + vec_n_;
    const uintptr_t after = reinterpret_cast<uintptr_t>(mult_all + (a_row_ ? m : 1) * n);
    double* zero = reinterpret_cast<double*>((after + alignof(double) - 1) & ~uintptr_t(alignof(double) - 1));
    for (int64_t j = 0; j < n; ++j) zero[j] = zy[y_col_ ? j : 0];
    for (int64_t i = 0; i < (a_row_ ? m : 1); ++i)
      for (int64_t j = 0; j < n; ++j)
        mult_all[i * n + j] = round_to(st_, round_to(st_, sa[i] * sb[b_col_ ? j : 0]) / sy[y_col_ ? j : 0]);
    const double lo = static_cast<double>(lo_), hi = static_cast<double>(hi_);
    auto requant = [&](auto tag) {
      using Y = typename decltype(tag)::type;
      Y* y = ctx.outputs[0].as<Y>();
      parallel_for(y_n_ / std::max<int64_t>(1, n), ctx.num_threads, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n)),
                   [&](int64_t lo_row, int64_t hi_row) {
        for (int64_t r = lo_row; r < hi_row; ++r)
          requantize_row(c + r * n, mult_all + (a_row_ ? r % m : 0) * n, zero, lo, hi, n, y + r * n);
      });
    };
    if (out_ == DType::kInt8)
      requant(TypeTag<int8_t>{});
    else
      requant(TypeTag<uint8_t>{});
  }

 private:
  std::unique_ptr<QGemm> gemm_;
  DType out_, st_;
  bool a_row_ = false, b_col_ = false, y_col_ = false;
  int64_t lo_ = 0, hi_ = 0, vec_n_ = 1, y_n_ = 0;
};

}  // namespace

TWINFER_REGISTER_KERNEL("MatMulInteger", Backend::kCPU, 0, nullptr, make_kernel<MatMulIntegerKernel>);
TWINFER_REGISTER_KERNEL("QLinearMatMul", Backend::kCPU, 0, nullptr, make_kernel<QLinearMatMulKernel>);

}  // namespace twinfer::quant
