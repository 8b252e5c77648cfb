// com.twinfer::QBinary: the elementwise QDQ pattern
//
//   DequantizeLinear(a_q) , DequantizeLinear(b_q) -> Add | Mul [-> Relu | -> Add(c)] -> QuantizeLinear
//
// as one pass over the integers (graph/passes/fuse_qdq_binary.cc builds it).
// Per element, in float32 and in the QDQ graph's order, so the result is the
// same integers:
//   r = (a - a_zero) * a_scale  op  (b - b_zero) * b_scale     [r = max(r, 0) with activation Relu]
//   r = r + offset                                             [the constant c of an Add after the op]
//   y = saturate(round_half_even(r / y_scale) + y_zero)
// a and b broadcast (numpy rules).
//
// inputs: 0 a, 1 a_scale, 2 a_zero_point (optional), 3 b, 4 b_scale,
//         5 b_zero_point (optional), 6 y_scale, 7 y_zero_point (its type is y's)
//         a, b, y: uint8 / int8; scales float32 and zero points one element, constant.
// attributes: op = "Add" | "Mul"; activation = "" | "Relu" (max(r, 0) before quantizing);
// offset (float, default 0). onnxruntime's QLinearAdd, expanded in its output's
// units (expand_contrib_quant.cc), adds the output zero point as that offset:
// onnxruntime rounds after adding it, QuantizeLinear's zero point before.
#pragma once
#include <string>

#include "ops/kernel.h"
#include "ops/quant/quant_math.h"

namespace twinfer::quant {

inline constexpr const char* kQBinaryOp = "QBinary";

enum QBinaryInput : int { kQbA = 0, kQbAScale, kQbAZero, kQbB, kQbBScale, kQbBZero, kQbYScale, kQbYZero, kQbNumInputs };

// The node's constant scales and zero points as the element function takes
// them (quant_math.h); every backend's kernel reads them this way.
QBinaryParams qbinary_params(const KernelBuildInfo& info);
// Constant scales and zero points (what every QBinary kernel needs).
bool qbinary_supports(const KernelBuildInfo& info, std::string* why);

}  // namespace twinfer::quant
