// Per-token dynamic int8 quantization: every row of an activation (all but
// its last axis index a token) gets its own scale when it is used, instead of
// one scale calibrated ahead of time for the whole tensor:
//
//   scale[r] = max_k |x[r, k]| / 127        (1 for an all-zero row)
//   q[r, k]  = clamp(round_half_even(x[r, k] / scale[r]), -127, 127)      int8
//
// A transformer's tokens differ in range by 10x and more (a few tokens carry
// most of a GELU output's mass), so one static scale leaves most tokens
// with a handful of levels; per token, each row uses all of them. The integer
// product of q with per-output-channel int8 weights is then rescaled by
// scale[r] * w_scale[n] per output element.
//
// Two ops use it: com.twinfer::TokenQDQ (token_qdq.cc; the QDQ form that
// insert_qdq writes, quantize then dequantize, the reference) and QMatMul
// with x_per_token = 1 (qlinear_fused.h; the CPU kernel quantizes the rows
// into scratch and runs oneDNN's int8 matmul with the row scales as a
// post-op). The CUDA kernels (backends/cuda/token_quant.cu) take the same
// form: one block per row reduces |x| to its maximum and writes q and scale
// with the functions below (__host__ __device__), then cuBLASLt's int8 GEMM
// sums in int32 and the shared epilogue (quant_math.h, LinearEpilogue's
// row_scale) multiplies by w_scale[n] and scale[r] before the bias and
// activation.
#pragma once
#include <cstdint>

#include "ops/quant/quant_math.h"

namespace twinfer::quant {

inline constexpr float kTokenLevels = 127.f;

// The scale of a row whose largest |x| is `amax` (NaN-free). An all-zero row
// gets 1, so it quantizes to zeros without dividing by zero; an infinite
// |x| is taken as float's largest, so the row's other values stay finite.
TWINFER_QHD float token_scale(float amax) {
  if (!(amax > 0.f)) return 1.f;
  return (amax < 3.4e38f ? amax : 3.4e38f) / kTokenLevels;
}

// One element: x / scale rounded half to even and clamped to [-127, 127],
// NaN to 0: QuantizeLinear's arithmetic (quant_math.h) with zero point 0.
TWINFER_QHD int8_t token_quantize(float x, float scale) {
  return static_cast<int8_t>(requantize(x, scale, -kTokenLevels, kTokenLevels, 0));
}

// Rows [row_begin, row_end) of x [rows, k] (row-major): q and one scale per
// row. Vectorised on the CPU (token_quant.cc). `smooth` (k factors, or
// nullptr): the rows quantized are x[r, i] * smooth[i], the product rounded
// to float32 first, exactly as a Mul node in front would have written it.
void quantize_token_rows(const float* x, int64_t k, int64_t row_begin, int64_t row_end, int8_t* q, float* scales,
                         const float* smooth = nullptr);

// All rows, split over `threads` (whole rows per thread).
void quantize_tokens(const float* x, int64_t rows, int64_t k, int8_t* q, float* scales, int threads,
                     const float* smooth = nullptr);

}  // namespace twinfer::quant
