#include "backends/cpu/lstm_int8_projection.h"

#include <algorithm>
#include <cmath>

#include "backends/cpu/lstm_int8_recurrence.h"
#include "core/parallel.h"
#include "ops/quant/quantize_fast.h"
#include "ops/rnn/rnn_spec.h"

namespace twinfer::tx {

using lstm_int8::aligned64;

std::unique_ptr<LstmInt8Projection> LstmInt8Projection::of(const KernelBuildInfo& info, int dirs, int64_t m,
                                                           int64_t inputs, int64_t rows, const float* w) {
  const graph::Node& node = info.node();
  std::unique_ptr<LstmInt8Projection> p(new LstmInt8Projection());
  p->m_ = m, p->inputs_ = inputs, p->rows_ = rows;
  for (int d = 0; d < dirs; ++d) {
    std::vector<float> scale = lstm_int8::row_scales(node, rnn::kLstmInt8WScales, d, rows);
    // q^T [I, rows] (B of the product), from W_d [rows, I].
    std::vector<int8_t> qt;
    if (scale.empty() || !lstm_int8::transposed_int8(w + d * rows * inputs, rows, inputs, scale, &qt))
      return nullptr;
    p->gemm_.push_back(lstm_int8::u8_times(node, m, inputs, rows, qt));
    p->scale_.push_back(std::move(scale));
  }
  return p;
}

size_t LstmInt8Projection::scratch_bytes() const {
  size_t s = 0;
  for (const auto& g : gemm_) s = std::max(s, g->scratch_bytes());
  return s;
}

size_t LstmInt8Projection::work_bytes() const {
  // X's uint8 values, the int32 sums, the column multipliers.
  return aligned64(static_cast<size_t>(m_ * inputs_)) + aligned64(static_cast<size_t>(m_ * rows_) * sizeof(int32_t)) +
         aligned64(static_cast<size_t>(rows_) * sizeof(float));
}

LstmInt8Projection::Quantized LstmInt8Projection::quantize(const KernelContext& ctx, const float* x, int64_t count,
                                                           void* work) const {
  float mn = 0.f, mx = 0.f;
  quant::min_max_with_zero(x, count, ctx.num_threads, &mn, &mx);
  Quantized q;
  if (mx == mn) return q;  // all zeros: so is every projection
  // DynamicQuantizeLinear's parameters, then its rounding. Values past
  // `count` (steps no sequence runs) are quantized too, and saturate.
  q.scale = (mx - mn) / 255.f;
  q.zero_point = static_cast<int32_t>(std::nearbyint(std::min(255.f, std::max(0.f, 0.f - mn / q.scale))));
  quant::quantize_to_u8(x, static_cast<uint8_t*>(work), m_ * inputs_, q.scale, q.zero_point, ctx.num_threads);
  return q;
}

void LstmInt8Projection::project(const KernelContext& ctx, int d, const Quantized& q, float* xp, void* work) const {
  const int64_t rows = rows_;
  if (q.scale == 0.f) {
    std::fill(xp, xp + m_ * rows, 0.f);
    return;
  }
  const auto* xq = static_cast<const uint8_t*>(work);
  auto* acc = reinterpret_cast<int32_t*>(static_cast<char*>(work) + aligned64(static_cast<size_t>(m_ * inputs_)));
  auto* mult = reinterpret_cast<float*>(reinterpret_cast<char*>(acc) +
                                        aligned64(static_cast<size_t>(m_ * rows) * sizeof(int32_t)));
  gemm_[d]->run(ctx, xq, nullptr, &q.zero_point, false, nullptr, false, acc);
  // onnxruntime's output processor: the int32 sums times (X's scale x W's scale).
  for (int64_t j = 0; j < rows; ++j) mult[j] = q.scale * scale_[d][j];
  parallel_for(m_, ctx.num_threads, std::max<int64_t>(1, 65536 / rows), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) lstm_int8::dequantize_row(acc + r * rows, nullptr, mult, xp + r * rows, rows);
  });
}

}  // namespace twinfer::tx
