// float32 -> int32 and bool over arrays as loops the compiler
// vectorises (multiversioned, core/simd_clones.h): the same values as
// cast_value's scalar rule (scalar.h: truncation toward zero, NaN -> 0,
// saturation; bool is x != 0), which the general Cast kernel's baseline
// build ran at 1.85-1.89x onnxruntime's time in stop 45's survey
// (docs/performance.md); int32 -> float32 and bool -> float32 (a mask or a
// one-hot made by Equal, as jax2tf writes one_hot) too. (int64 has no vector
// conversion below AVX-512DQ, which the clones do not target.)
#pragma once
#include <cstdint>

namespace twinfer::ew {

void floats_to_int32(const float* x, int32_t* y, int64_t n);
void floats_to_bool(const float* x, bool* y, int64_t n);
void int32_to_floats(const int32_t* x, float* y, int64_t n);
// x: bool's bytes, read as bytes (any nonzero is true).
void bools_to_floats(const uint8_t* x, float* y, int64_t n);

}  // namespace twinfer::ew
