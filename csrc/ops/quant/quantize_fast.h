// The vectorised float32 -> uint8 loops of quantize_fast.cc, for the other
// quantizing kernels (DynamicQuantizeLinear, per-token quantization).
#pragma once
#include <cstdint>

namespace twinfer::quant {

// min(0, x...) and max(0, x...) over x[0, n), NaNs skipped, on `threads` threads.
void min_max_with_zero(const float* x, int64_t n, int threads, float* mn, float* mx);

// The same on the calling thread (a row at a time: per-token quantization).
void min_max_with_zero_serial(const float* x, int64_t n, float* mn, float* mx);

// y = saturate(round_half_even(x / scale) + zero_point) as uint8 (NaN -> zero_point).
void quantize_to_u8(const float* x, uint8_t* y, int64_t n, float scale, int32_t zero_point, int threads);

}  // namespace twinfer::quant
