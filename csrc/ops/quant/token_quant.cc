// The CPU loops of per-token quantization (token_quant.h).
#include "ops/quant/token_quant.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/parallel.h"
#include "core/simd_clones.h"
#include "ops/quant/quantize_fast.h"

namespace twinfer::quant {
namespace {

// max |x| over a row as max(max x, -min x), NaN skipped: quantize_fast.cc's
// min/max loop vectorises, where a loop over fabs(x) stayed sixteen scalar
// maxss per step.
float abs_max(const float* x, int64_t n) {
  float lo = 0.f, hi = 0.f;
  min_max_with_zero_serial(x, n, &lo, &hi);
  return std::max(hi, -lo);
}

// token_quantize's arithmetic written out, with the bounds as arguments:
// with them constant GCC turned the clamp into branches (the saturated
// results as constants) and kept the loop scalar: MiniLM's per-token
// QMatMul of a 128 x 1536 block took 0.24 ms (profile_ops), oneDNN's product
// in it 0.05 (ONEDNN_VERBOSE). In this form, quantize_fast.cc's, it
// vectorises (the clones are called through their resolver, so the
// constants are not propagated back in).
TWINFER_SIMD_CLONES void quantize_row(const float* __restrict x, int8_t* __restrict q, int64_t n, float scale,
                                      float lo, float hi) {
  constexpr float kMagic = 12582912.f;  // 1.5 * 2^23: (v + kMagic) - kMagic rounds half to even
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i] / scale;
    v = v == v ? v : 0.f;
    v = std::min(std::max(v, lo), hi);
    v = (v + kMagic) - kMagic;
    q[i] = static_cast<int8_t>(static_cast<int32_t>(v));
  }
}

TWINFER_SIMD_CLONES void multiply_row(const float* __restrict x, const float* __restrict s, float* __restrict y,
                                      int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s[i];
}

}  // namespace

void quantize_token_rows(const float* x, int64_t k, int64_t row_begin, int64_t row_end, int8_t* q, float* scales,
                         const float* smooth) {
  // Smoothed rows go through a row-sized buffer that stays in L1: one more
  // pass over cached data instead of a Mul node's pass through memory.
  std::vector<float> smoothed(smooth ? static_cast<size_t>(k) : 0);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const float* row = x + r * k;
    if (smooth) {
      multiply_row(row, smooth, smoothed.data(), k);
      row = smoothed.data();
    }
    const float s = token_scale(abs_max(row, k));
    scales[r] = s;
    quantize_row(row, q + r * k, k, s, -kTokenLevels, kTokenLevels);
  }
}

void quantize_tokens(const float* x, int64_t rows, int64_t k, int8_t* q, float* scales, int threads,
                     const float* smooth) {
  // ~16K elements per thread before splitting pays for the fork.
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, k));
  parallel_for(rows, threads, grain,
               [&](int64_t b, int64_t e) { quantize_token_rows(x, k, b, e, q, scales, smooth); });
}

}  // namespace twinfer::quant
