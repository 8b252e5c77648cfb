#include "ops/elementwise/cast_rows.h"

#include "core/simd_clones.h"
#include "ops/elementwise/scalar.h"

// Built without trapping math (CMakeLists.txt): the saturating selects are
// then computed both ways and blended, and the loops vectorise.
namespace twinfer::ew {

TWINFER_SIMD_CLONES void floats_to_int32(const float* __restrict x, int32_t* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = convert<int32_t>(x[i]);
}

TWINFER_SIMD_CLONES void floats_to_bool(const float* __restrict x, bool* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] != 0.f;
}

TWINFER_SIMD_CLONES void int32_to_floats(const int32_t* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i]);
}

TWINFER_SIMD_CLONES void bools_to_floats(const uint8_t* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] != 0 ? 1.f : 0.f;
}

}  // namespace twinfer::ew
