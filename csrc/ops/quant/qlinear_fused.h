// The int8 ops the QDQ fusion (graph/passes/fuse_qdq.cc) builds, domain
// com.twinfer. They compute what the QDQ pattern they replace computes,
//
//   DequantizeLinear(x_q) -> MatMul|Gemm|Conv <- DequantizeLinear(w_q)
//        [+ bias] [-> activation] [-> QuantizeLinear]
//
// but on integers: a oneDNN int8 primitive multiplies the quantized
// activation (uint8/int8, one scale and zero point) by the int8 weights
// (per-output-channel scales, zero point 0, packed once when the kernel is
// built), accumulates in int32 and applies x_scale * w_scale[n], the float
// bias, the activation and, when the node has y_scale, the requantization
// round(y / y_scale) + y_zero_point (saturated) in its epilogue.
//
//   com.twinfer::QMatMul   y[.., N] = x[.., K] x W
//   com.twinfer::QConv     y = conv(x, W) with Conv's attributes
//
// inputs (both ops; all but x constant, except that QMatMul's CPU kernel
// also takes x_scale and x_zero_point computed at run time, as a
// DynamicQuantizeLinear does: graph/passes/fuse_matmul_integer.cc):
//   0 x            uint8 / int8
//   1 x_scale      float32, one element
//   2 x_zero_point x's type, one element (optional: 0)
//   3 w            int8; QMatMul: [K, N] ([N, K] with trans_b = 1);
//                  QConv: [M, C/group, k...]
//   4 w_scale      float32 [N] / [M] (or one element)
//   5 bias         float32 [N] / [M] (optional)
//   6 y_scale      float32, one element (optional: the output is float32)
//   7 y_zero_point uint8 / int8, one element (with y_scale; its type is y's)
//   8 x_smooth     float32 [K] (optional; QMatMul with x_per_token only): x
//                  is multiplied by it channel by channel before its rows are
//                  quantized, in the same pass (see below)
// attributes: activation / activation_params (ops/nn/activation.h); QMatMul
// trans_b; QConv the Conv attributes (auto_pad, dilations, group,
// kernel_shape, pads, strides).
//
// QMatMul with x_per_token = 1 takes x as float32 (float16 / bfloat16 in a
// device plan's lowered region) and no x_scale or
// x_zero_point: the kernel quantizes each row of x with its own scale when it
// runs (ops/quant/token_quant.h; what com.twinfer::TokenQDQ computes), and
// the product is rescaled by that row's scale times w_scale[n]. With
// x_smooth, the rows quantized are x[r, k] * x_smooth[k]: the SmoothQuant
// factor that graph/passes/smooth_activations.cc puts in a Mul when no
// LayerNormalization can absorb it (the LayerNorm output also feeds a
// residual, or a GELU output), which the QDQ fusion folds in here so the
// scaled activation never goes through memory.
//
// QMatMul's float y (no y_scale) is float32, or the type its attribute
// out_dtype names (ONNX's TensorProto code: float16 / bfloat16): what
// graph/passes/lower_precision.cc sets in a device plan's 16-bit region, so
// the epilogue writes the 16-bit rows itself, saturated to the type's finite
// range as lowering's Clip -> Cast would (one pass over y, not three).
#pragma once

#include "core/dtype.h"

namespace twinfer::graph {
struct Node;
}

namespace twinfer::quant {

inline constexpr const char* kQMatMulOp = "QMatMul";
inline constexpr const char* kQConvOp = "QConv";

// y's type without y_scale: out_dtype, float32 when absent.
DType qmatmul_float_out(const graph::Node& n);

enum QLinearInput : int { kQX = 0, kQXScale, kQXZero, kQW, kQWScale, kQBias, kQYScale, kQYZero, kQXSmooth, kQNumInputs };

}  // namespace twinfer::quant
