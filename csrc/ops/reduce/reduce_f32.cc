#include "ops/reduce/reduce_f32.h"


#include "core/float_lanes.h"
#include "core/simd_clones.h"
#include "ops/elementwise/fast_exp.h"

namespace twinfer::reduce {

namespace {

// b where it is larger (smaller) than a, else a: NaN in b is dropped.
template <bool kMax>
inline __attribute__((always_inline)) float pick(float a, float b) {
  return kMax ? (b > a ? b : a) : (b < a ? b : a);
}

// Whether some element of x[0, n) is NaN, given the sum of v - v over them
// (0 unless some v is NaN or infinite).
inline bool nan_behind(float chk, const float* x, int64_t n) {
  if (chk == 0.f) return false;
  for (int64_t i = 0; i < n; ++i)
    if (x[i] != x[i]) return true;
  return false;
}

template <bool kMax>
inline __attribute__((always_inline)) float extreme_row(const float* x, int64_t n, bool* nan) {
  const float start = kMax ? -__builtin_inff() : __builtin_inff();
  Lanes8 lanes = {start, start, start, start, start, start, start, start}, chk = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const Lanes8 v = load8(x + i);
    lanes = kMax ? (v > lanes ? v : lanes) : (v < lanes ? v : lanes);
    chk += v - v;
  }
  float a = lanes[0], c = 0.f;
  for (; i < n; ++i) {
    a = pick<kMax>(a, x[i]);
    c += x[i] - x[i];
  }
  for (int k = 1; k < 8; ++k) a = pick<kMax>(a, lanes[k]);
  for (int k = 0; k < 8; ++k) c += chk[k];
  *nan = nan_behind(c, x, n);
  return a;
}

// Rows of columns summed in float this many at a time, then added in double:
// a float sum of 8 values is within a few ulp, and the double total keeps
// long sums accurate while the work is float-wide.
constexpr int64_t kFloatRun = 8;

}  // namespace

TWINFER_SIMD_CLONES void add_float_columns(const float* x, int64_t n, int64_t inner, int64_t m, double* acc) {
  float part[256];
  for (int64_t j0 = 0; j0 < m; j0 += 256) {
    const int64_t w = m - j0 < 256 ? m - j0 : 256;
    for (int64_t k0 = 0; k0 < n; k0 += kFloatRun) {
      const int64_t k1 = k0 + kFloatRun < n ? k0 + kFloatRun : n;
      const float* first = x + k0 * inner + j0;
      for (int64_t j = 0; j < w; ++j) part[j] = first[j];
      for (int64_t k = k0 + 1; k < k1; ++k) {
        const float* xk = x + k * inner + j0;
        for (int64_t j = 0; j < w; ++j) part[j] += xk[j];
      }
      for (int64_t j = 0; j < w; ++j) acc[j0 + j] += static_cast<double>(part[j]);
    }
  }
}

TWINFER_SIMD_CLONES double sum_float_row(const float* x, int64_t n) {
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) lane[k] += static_cast<double>(x[i + k]);
  for (; i < n; ++i) lane[0] += static_cast<double>(x[i]);
  double a = lane[0];
  for (int k = 1; k < 8; ++k) a += lane[k];
  return a;
}

TWINFER_SIMD_CLONES double sum_exp_float_row(const float* x, int64_t n, float shift) {
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) lane[k] += static_cast<double>(ew::exp_any(x[i + k] - shift));
  for (; i < n; ++i) lane[0] += static_cast<double>(ew::exp_any(x[i] - shift));
  double a = lane[0];
  for (int k = 1; k < 8; ++k) a += lane[k];
  return a;
}

TWINFER_SIMD_CLONES float max_float_row(const float* x, int64_t n, bool* nan) { return extreme_row<true>(x, n, nan); }
TWINFER_SIMD_CLONES float min_float_row(const float* x, int64_t n, bool* nan) {
  return extreme_row<false>(x, n, nan);
}

}  // namespace twinfer::reduce
