#include "ops/nn/softmax_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/simd_clones.h"
#include "ops/elementwise/fast_exp.h"

namespace twinfer::nn {

namespace {

// Independent accumulators, so the compiler keeps a vector of them (a
// reduction into one float would be a dependency chain it may not reorder).
constexpr int kLanes = 16;

inline __attribute__((always_inline)) float larger(float a, float b) { return a > b ? a : b; }

// exp(d) for d <= 0 (or NaN: NaN); 0 below -87, where the result leaves
// float's normal range (a weight under 1e-38 of the row's largest, which is
// 1), so a masked (-inf) element weighs exactly nothing and 2^k needs one
// factor (fast_exp.h's exp_nonpositive, cheaper than its subnormal-exact
// exp_negative).
inline __attribute__((always_inline)) float exp_shifted(float d) {
  const float e = ew::exp_nonpositive(d);
  return d != d ? d : (d < -87.f ? 0.f : e);
}

// 16 floats as one value: a zmm register in the AVX-512 clone, two ymm in
// the AVX2 one. The max reductions below are written on these, since GCC
// leaves a > b ? a : b reductions scalar (NaN rules) where vmaxps does the
// same thing: it keeps its second operand when either is NaN.
typedef float Vec16 __attribute__((vector_size(64)));

inline __attribute__((always_inline)) Vec16 load16(const float* p) {
  Vec16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline __attribute__((always_inline)) void store16(float* p, Vec16 v) { std::memcpy(p, &v, sizeof v); }
inline __attribute__((always_inline)) float max_of(Vec16 v, float m) {
  for (int l = 0; l < kLanes; ++l) m = larger(v[l], m);
  return m;
}

// y = x * scale (+ m) with y's max; NaN elements do not count in the max
// (they make the sum NaN below, which is what turns their row NaN). x, m and
// y may be the same row: each element is read before it is written.
TWINFER_SIMD_CLONES float scale_and_max(const float* x, const float* m, int64_t m_step, float scale, float* y,
                                        int64_t n) {
  Vec16 lanes = Vec16{} - INFINITY;
  const float c = m && !m_step ? *m : 0.f;
  const bool per_element = m && m_step;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const Vec16 v = load16(x + i) * scale + (per_element ? load16(m + i) : Vec16{} + c);
    store16(y + i, v);
    lanes = v > lanes ? v : lanes;
  }
  float mx = max_of(lanes, -INFINITY);
  for (; i < n; ++i) mx = larger(y[i] = x[i] * scale + (per_element ? m[i] : c), mx);
  return mx;
}

// t[l] = exp(t[l] - mx) for 16 lanes, each added to its lane's sum.
inline __attribute__((always_inline)) void exp16(float* __restrict t, float mx, float* __restrict lane) {
  for (int l = 0; l < kLanes; ++l) {
    const float e = exp_shifted(t[l] - mx);
    t[l] = e;
    lane[l] += e;
  }
}

// y = exp(y - mx), returning the sum. The last n % 16 go through the same
// vector code padded with -inf (exp 0): a scalar exp per element of the tail
// cost as much as the rest of a row of 197.
TWINFER_SIMD_CLONES float exp_and_sum(float* __restrict y, int64_t n, float mx) {
  float lane[kLanes];
  for (int l = 0; l < kLanes; ++l) lane[l] = 0.f;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) exp16(y + i, mx, lane);
  if (i < n) {
    float t[kLanes];
    const int64_t rest = n - i;
    for (int l = 0; l < kLanes; ++l) t[l] = l < rest ? y[i + l] : -INFINITY;
    exp16(t, mx, lane);
    for (int64_t l = 0; l < rest; ++l) y[i + l] = t[l];
  }
  float sum = 0.f;
  for (int l = 0; l < kLanes; ++l) sum += lane[l];
  return sum;
}

// lane[l] += exp(t[l] - mx) for 16 lanes, t unchanged.
inline __attribute__((always_inline)) void sum16(const float* __restrict t, float mx, float* __restrict lane) {
  for (int l = 0; l < kLanes; ++l) lane[l] += exp_shifted(t[l] - mx);
}

// The sum of exp(y - mx), y unchanged (LogSoftmax keeps the shifted values).
TWINFER_SIMD_CLONES float sum_exp(const float* __restrict y, int64_t n, float mx) {
  float lane[kLanes];
  for (int l = 0; l < kLanes; ++l) lane[l] = 0.f;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) sum16(y + i, mx, lane);
  if (i < n) {
    float t[kLanes];
    for (int l = 0; l < kLanes; ++l) t[l] = l < n - i ? y[i + l] : -INFINITY;
    sum16(t, mx, lane);
  }
  float sum = 0.f;
  for (int l = 0; l < kLanes; ++l) sum += lane[l];
  return sum;
}

TWINFER_SIMD_CLONES void shift_in_place(float* __restrict y, int64_t n, float mx, float log_sum) {
  for (int64_t i = 0; i < n; ++i) y[i] = (y[i] - mx) - log_sum;
}

TWINFER_SIMD_CLONES void scale_in_place(float* __restrict y, int64_t n, float f) {
  for (int64_t i = 0; i < n; ++i) y[i] *= f;
}

// Softmax / LogSoftmax down kColumns columns at a time of x viewed as
// [len, inner] (a non-innermost axis: [N, classes, positions]): each pass
// walks the len rows and updates a vector of per-column values, so the
// loops over columns vectorise. The same rules as the rows: a NaN in a
// column (or all -inf) makes it NaN throughout.
constexpr int64_t kColumns = 64;

TWINFER_SIMD_CLONES void softmax_column_block(const float* x, float* y, int64_t len, int64_t inner, int64_t w,
                                              bool log) {
  float mx[kColumns], sum[kColumns], f[kColumns];
  for (int64_t j = 0; j < w; ++j) {
    mx[j] = -INFINITY;
    sum[j] = 0.f;
  }
  for (int64_t i = 0; i < len; ++i) {
    const float* xi = x + i * inner;
    for (int64_t j = 0; j < w; ++j) mx[j] = larger(xi[j], mx[j]);
  }
  for (int64_t i = 0; i < len; ++i) {
    const float* xi = x + i * inner;
    float* yi = y + i * inner;
    for (int64_t j = 0; j < w; ++j) {
      const float e = exp_shifted(xi[j] - mx[j]);
      if (!log) yi[j] = e;
      sum[j] += e;
    }
  }
  // LogSoftmax: (x - max) - log(sum), as the rows do (x - max is exact near
  // the max, where max + log(sum) would round at the max's scale).
  for (int64_t j = 0; j < w; ++j) f[j] = log ? std::log(sum[j]) : 1.f / sum[j];  // NaN sum: NaN
  for (int64_t i = 0; i < len; ++i) {
    const float* xi = x + i * inner;
    float* yi = y + i * inner;
    if (log) {
      for (int64_t j = 0; j < w; ++j) yi[j] = (xi[j] - mx[j]) - f[j];
    } else {
      for (int64_t j = 0; j < w; ++j) yi[j] = sum[j] != sum[j] ? sum[j] : yi[j] * f[j];
    }
  }
}

}  // namespace

void softmax_columns(const float* x, float* y, int64_t len, int64_t inner, int64_t j0, int64_t j1, bool log) {
  for (; j0 < j1; j0 += kColumns) softmax_column_block(x + j0, y + j0, len, inner, std::min(kColumns, j1 - j0), log);
}

void softmax_row(const float* x, const float* m, int64_t m_step, float scale, float* y, int64_t n) {
  if (n <= 0) return;
  const float mx = scale_and_max(x, m, m_step, scale, y, n);
  // Every element -inf (or NaN): -inf - -inf is NaN, as ONNX's definition gives.
  const float sum = exp_and_sum(y, n, mx);
  if (sum != sum) {  // a NaN anywhere in the row (or an +inf max): the row is NaN
    for (int64_t i = 0; i < n; ++i) y[i] = NAN;
    return;
  }
  scale_in_place(y, n, 1.f / sum);
}

void log_softmax_row(const float* x, float* y, int64_t n) {
  if (n <= 0) return;
  const float mx = scale_and_max(x, nullptr, 0, 1.f, y, n);
  const float sum = sum_exp(y, n, mx);
  if (sum != sum) {
    for (int64_t i = 0; i < n; ++i) y[i] = NAN;
    return;
  }
  shift_in_place(y, n, mx, std::log(sum));
}

}  // namespace twinfer::nn
