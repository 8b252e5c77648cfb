// The QOperator format's integer layers onto the int8 kernels the QDQ fusion
// targets: ONNX's QLinearConv and QLinearMatMul, as onnxruntime's
// quantize_static (QuantFormat.QOperator) and older model zoo int8 models
// write them, become com.twinfer::QConv / QMatMul (ops/quant/qlinear_fused.h)
//
//   QLinearConv(x, xs, xz, w, ws, wz, ys, yz, B)
//     -> QConv(x, 1, xz, w, mult, bias = B * mult, 1, yz), Conv's attributes
//   QLinearMatMul(a, as, az, b, bs, bz, ys, yz)
//     -> QMatMul(a, 1, az, b, mult, -, 1, yz)
//   with mult[m] = float(xs * ws[m] / ys), the definition's multiplier
//
// so such a model runs on cuDNN's / cuBLASLt's int8 paths on a GPU (and the
// int8 NHWC passes that follow take it) instead of a direct kernel, and on
// oneDNN's int8 convolution with its requantization fused on the CPU.
//
// The forms the fused ops take: constant weights whose values less their zero
// points (per tensor or per output channel) fit int8 -- onnxruntime's QInt8
// weights (zero points 0) as they are, uint8 weights around 128 as an int8
// copy, exactly; x's and y's scale and zero point constants of one element;
// float32 scales; QLinearMatMul's b 2-D. Anything else (weights that do not
// fit, per-row scales of a) keeps its own kernel.
//
// The fused kernels then round sum * mult[m] (+ the bias) once, in float, as
// the definition and onnxruntime do; the bias is added scaled rather than to
// the integer sum, which can move a result that sits on a half level by one.
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {

// Whether the graph has a QLinearConv or QLinearMatMul node.
bool has_qlinear_layer(const graph::Graph& g);

// Returns the number of nodes rewritten.
int fuse_qlinear(graph::Graph& g, const PassContext& ctx);

}  // namespace twinfer::passes
