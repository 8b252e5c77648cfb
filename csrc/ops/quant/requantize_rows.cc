#include "ops/quant/requantize_rows.h"

#include <cmath>

#include "core/simd_clones.h"

namespace twinfer::quant {

namespace {

// NaN -> 0, saturate, then round half to even (nearbyint in the default
// rounding mode; the bounds are integers, so rounding after the clamp gives
// what rounding before it would).
inline double saturate_round(double v, double lo, double hi) {
  v = v != v ? 0.0 : v;
  v = v < lo ? lo : v;
  v = v > hi ? hi : v;
  return std::nearbyint(v);
}

// Bodies inlined into each cloned entry point below, so that each is
// vectorised for its own target.
template <typename Y>
__attribute__((always_inline)) inline void columns(const int32_t* __restrict c, const float* __restrict mult,
                                 const double* __restrict zero, double lo, double hi, int64_t n, Y* __restrict y) {
  for (int64_t j = 0; j < n; ++j)
    y[j] = static_cast<Y>(static_cast<int32_t>(
        saturate_round(static_cast<double>(c[j]) * static_cast<double>(mult[j]) + zero[j], lo, hi)));
}

template <typename Y>
__attribute__((always_inline)) inline void row(const int32_t* __restrict c, int32_t bias, float mult, double zero, double lo, double hi,
                             int64_t n, Y* __restrict y) {
  const double m = static_cast<double>(mult);
  const uint32_t b = static_cast<uint32_t>(bias);
  for (int64_t j = 0; j < n; ++j) {
    const int32_t s = static_cast<int32_t>(static_cast<uint32_t>(c[j]) + b);
    y[j] = static_cast<Y>(static_cast<int32_t>(saturate_round(static_cast<double>(s) * m + zero, lo, hi)));
  }
}

TWINFER_SIMD_CLONES void columns_u8(const int32_t* c, const float* mult, const double* zero, double lo, double hi,
                                    int64_t n, uint8_t* y) {
  columns(c, mult, zero, lo, hi, n, y);
}
TWINFER_SIMD_CLONES void columns_s8(const int32_t* c, const float* mult, const double* zero, double lo, double hi,
                                    int64_t n, int8_t* y) {
  columns(c, mult, zero, lo, hi, n, y);
}
TWINFER_SIMD_CLONES void row_u8(const int32_t* c, int32_t bias, float mult, double zero, double lo, double hi,
                                int64_t n, uint8_t* y) {
  row(c, bias, mult, zero, lo, hi, n, y);
}
TWINFER_SIMD_CLONES void row_s8(const int32_t* c, int32_t bias, float mult, double zero, double lo, double hi,
                                int64_t n, int8_t* y) {
  row(c, bias, mult, zero, lo, hi, n, y);
}

}  // namespace

void requantize_row(const int32_t* c, const float* mult, const double* zero, double lo, double hi, int64_t n,
                    uint8_t* y) {
  columns_u8(c, mult, zero, lo, hi, n, y);
}
void requantize_row(const int32_t* c, const float* mult, const double* zero, double lo, double hi, int64_t n,
                    int8_t* y) {
  columns_s8(c, mult, zero, lo, hi, n, y);
}
void requantize_row(const int32_t* c, int32_t bias, float mult, double zero, double lo, double hi, int64_t n,
                    uint8_t* y) {
  row_u8(c, bias, mult, zero, lo, hi, n, y);
}
void requantize_row(const int32_t* c, int32_t bias, float mult, double zero, double lo, double hi, int64_t n,
                    int8_t* y) {
  row_s8(c, bias, mult, zero, lo, hi, n, y);
}

}  // namespace twinfer::quant
