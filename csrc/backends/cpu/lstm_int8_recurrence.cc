#include "backends/cpu/lstm_int8_recurrence.h"

#include <algorithm>
#include <cmath>

#include "ops/quant/quantize_fast.h"
#include "ops/rnn/rnn_spec.h"

namespace twinfer::tx {

namespace lstm_int8 {

std::vector<float> row_scales(const graph::Node& node, const char* attr, int d, int64_t rows) {
  if (!node.has_attr(attr)) return {};
  const std::vector<float> scales = node.attr_floats(attr);
  if (static_cast<int64_t>(scales.size()) < (d + 1) * rows) return {};
  return std::vector<float>(scales.begin() + d * rows, scales.begin() + (d + 1) * rows);
}

bool transposed_int8(const float* m, int64_t rows, int64_t cols, const std::vector<float>& scale,
                     std::vector<int8_t>* qt) {
  qt->resize(static_cast<size_t>(rows * cols));
  for (int64_t j = 0; j < rows; ++j) {
    const float s = scale[j];
    if (!(s > 0.f) || !std::isfinite(s)) return false;
    for (int64_t i = 0; i < cols; ++i) {
      const float v = m[j * cols + i] / s;
      const float q = std::nearbyint(v);
      if (!(std::fabs(v - q) <= 1e-3f) || q < -128.f || q > 127.f) return false;
      (*qt)[i * rows + j] = static_cast<int8_t>(q);
    }
  }
  return true;
}

std::unique_ptr<quant::QGemm> u8_times(const graph::Node& node, int64_t m, int64_t k, int64_t n,
                                       const std::vector<int8_t>& qt) {
  quant::QGemmDesc g;
  g.a = {m, k};
  g.b = {k, n};
  g.a_type = DType::kUInt8;
  g.b_type = DType::kInt8;
  g.b_const = qt.data();
  return std::make_unique<quant::QGemm>(g, node.name, node.op_type);
}

}  // namespace lstm_int8

namespace {
using lstm_int8::aligned64;

// y[j] = sum_k h[k] q[j, k] for each of q's rows: at batch 1 the product is
// a dot product per row, which GCC compiles to vpdpbusd under this target.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) void u8_dot_rows(
    const uint8_t* __restrict h, const int8_t* __restrict q, int32_t* __restrict y, int64_t k, int64_t rows) {
  for (int64_t j = 0; j < rows; ++j) {
    const int8_t* r = q + j * k;
    int32_t s = 0;
    for (int64_t i = 0; i < k; ++i) s += int32_t(h[i]) * int32_t(r[i]);
    y[j] = s;
  }
}

bool has_avx512_vnni() {
#if defined(__GNUC__) && defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw");
#else
  return false;
#endif
}
}  // namespace

std::unique_ptr<LstmInt8Recurrence> LstmInt8Recurrence::of(const KernelBuildInfo& info, int d, int64_t n,
                                                           int64_t hidden, int64_t rows, const float* r) {
  const graph::Node& node = info.node();
  std::unique_ptr<LstmInt8Recurrence> k(new LstmInt8Recurrence());
  k->n_ = n, k->hidden_ = hidden, k->rows_ = rows;
  k->scale_ = lstm_int8::row_scales(node, rnn::kLstmInt8RScales, d, rows);
  // q^T [H, rows] (B of the product), from R [rows, H].
  std::vector<int8_t> qt;
  if (k->scale_.empty() || !lstm_int8::transposed_int8(r, rows, hidden, k->scale_, &qt)) return nullptr;
  if (n == 1 && has_avx512_vnni()) {  // a dot product per row; q's row sums apply h's zero point
    k->q_rows_.resize(static_cast<size_t>(rows * hidden));
    k->q_sums_.assign(static_cast<size_t>(rows), 0);
    for (int64_t j = 0; j < rows; ++j)
      for (int64_t i = 0; i < hidden; ++i) {
        k->q_rows_[j * hidden + i] = qt[i * rows + j];
        k->q_sums_[j] += qt[i * rows + j];
      }
    return k;
  }
  k->gemm_ = lstm_int8::u8_times(node, n, hidden, rows, qt);
  return k;
}

size_t LstmInt8Recurrence::work_bytes() const {
  return aligned64(static_cast<size_t>(n_ * hidden_)) + aligned64(static_cast<size_t>(n_ * rows_) * sizeof(int32_t));
}

void LstmInt8Recurrence::run(const KernelContext& ctx, const float* h, float* rh, void* work) const {
  const int64_t count = n_ * hidden_;
  float mn = 0.f, mx = 0.f;
  quant::min_max_with_zero_serial(h, count, &mn, &mx);
  if (mx == mn) {  // h is all 0 (the first step from zero states): so is the product
    std::fill(rh, rh + n_ * rows_, 0.f);
    return;
  }
  // DynamicQuantizeLinear's parameters, then its rounding.
  const float scale = (mx - mn) / 255.f;
  const float zp = std::nearbyint(std::min(255.f, std::max(0.f, 0.f - mn / scale)));
  auto* hq = static_cast<uint8_t*>(work);
  auto* acc = reinterpret_cast<int32_t*>(static_cast<char*>(work) + aligned64(static_cast<size_t>(count)));
  quant::quantize_to_u8(h, hq, count, scale, static_cast<int32_t>(zp), 1);
  const int32_t za = static_cast<int32_t>(zp);
  if (gemm_) {
    gemm_->run(ctx, hq, nullptr, &za, false, nullptr, false, acc);
  } else {
    u8_dot_rows(hq, q_rows_.data(), acc, hidden_, rows_);
    for (int64_t j = 0; j < rows_; ++j) acc[j] -= za * q_sums_[j];
  }
  for (int64_t b = 0; b < n_; ++b)
    for (int64_t j = 0; j < rows_; ++j) rh[b * rows_ + j] = static_cast<float>(acc[b * rows_ + j]) * scale * scale_[j];
}

}  // namespace twinfer::tx
