// float32 <-> float16 over arrays: F16C's conversion instructions where the
// CPU has them, else branch-free code the compiler vectorises (multiversioned,
// core/simd_clones.h); either way the same values as core/half.h's
// float_to_half / half_to_float (round to nearest even, overflow to inf,
// subnormals exact), which branch per element; a NaN comes out quiet with
// its payload's top bits, as F16C gives it, in both forms. Cast
// float32 -> float16 through those measured 13x onnxruntime's time in stop
// 43's survey (docs/performance.md).
#pragma once
#include <cstdint>

namespace twinfer::ew {

void floats_to_halves(const float* x, uint16_t* y, int64_t n);
void halves_to_floats(const uint16_t* x, float* y, int64_t n);

// The software forms alone (what a CPU without F16C runs; tests reach them
// through twinfer._core._test_*_soft).
void floats_to_halves_soft(const float* x, uint16_t* y, int64_t n);
void halves_to_floats_soft(const uint16_t* x, float* y, int64_t n);

}  // namespace twinfer::ew
