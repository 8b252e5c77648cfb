// com.twinfer::TokenQDQ: per-token dynamic quantize-dequantize (token_quant.h),
//
//   y[r, k] = q[r, k] * scale[r],  scale[r] = max_k |x[r, k]| / 127,
//   q[r, k] = clamp(round_half_even(x[r, k] / scale[r]), -127, 127)
//
// over the rows of x (every index of its leading axes; k its last axis).
// It is what insert_qdq writes in front of a MatMul/Gemm whose activation is
// quantized per token (the dynamic counterpart of a QuantizeLinear ->
// DequantizeLinear pair), and what the QDQ fusion folds into QMatMul
// (x_per_token = 1) so the integers never reach memory as floats.
//
// input: x float32, rank >= 1; output: y float32, x's shape. No attributes.
#pragma once

namespace twinfer::quant {

inline constexpr const char* kTokenQDQOp = "TokenQDQ";

}  // namespace twinfer::quant
