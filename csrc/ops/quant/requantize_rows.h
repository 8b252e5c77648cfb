// The last step of QLinearMatMul and QLinearConv on the CPU: rows of int32
// sums requantized as the ONNX reference does,
//
//   y[j] = saturate(round_half_even(double(c[j]) * mult + zero))
//
// with mult the float multiplier (x_scale * w_scale / y_scale, computed by
// the caller in the scales' own type) widened to double, and a NaN (from a
// scale of 0 or inf) saturating to 0. One vectorised pass per row (AVX-512 /
// AVX2 clones, no FMA contraction: the product and the sum round apart, as
// the scalar definition does); the per-element floor / fmod rounding it
// replaces took 15 ms for MiniLM's 8 x 12 x 128 x 128 attention scores.
#pragma once
#include <cstdint>

namespace twinfer::quant {

// Per-column multipliers and zero points (n of each).
void requantize_row(const int32_t* c, const float* mult, const double* zero, double lo, double hi, int64_t n,
                    uint8_t* y);
void requantize_row(const int32_t* c, const float* mult, const double* zero, double lo, double hi, int64_t n,
                    int8_t* y);

// One multiplier and zero point for the row, and an int32 bias added to
// every sum first (wrapping modulo 2^32 as the int32 reference does).
void requantize_row(const int32_t* c, int32_t bias, float mult, double zero, double lo, double hi, int64_t n,
                    uint8_t* y);
void requantize_row(const int32_t* c, int32_t bias, float mult, double zero, double lo, double hi, int64_t n,
                    int8_t* y);

}  // namespace twinfer::quant
