// The QOperator format's integer layers onto the int8 kernels the QDQ fusion
// targets: ONNX's QLinearConv and QLinearMatMul, as onnxruntime's
// quantize_static (QuantFormat.QOperator) and older model zoo int8 models
// write them, become com.twinfer::QConv / QMatMul (ops/quant/qlinear_fused.h)
//
//   QLinearConv(x, xs, xz, w, ws, wz, ys, yz, B)
//     -> QConv(x, xs, xz, w, ws, bias = B * xs * ws, ys, yz), Conv's attributes
//   QLinearMatMul(a, as, az, b, bs, bz, ys, yz)
//     -> QMatMul(a, as, az, b, bs, -, ys, yz)
//
// so such a model runs on cuDNN's / cuBLASLt's int8 paths on a GPU (and the
// int8 NHWC passes that follow take it) instead of a direct kernel, and on
// oneDNN's int8 convolution with its requantization fused on the CPU.
//
// The forms the fused ops take: the weights a constant int8 tensor with zero
// points 0 (per tensor or per output channel: onnxruntime's QInt8 weights);
// x's and y's scale and zero point constants of one element; float32 scales;
// QLinearMatMul's b 2-D. Anything else (uint8 weights, a weight zero point
// other than 0, per-row scales of a) keeps its own kernel.
//
// The requantization is the same sum scaled by xs * ws[m] / ys, computed
// by the fused kernels in float as (sum * xs * ws[m] + bias) / ys rather
// than as sum * round(xs * ws[m] / ys): a result can differ by one level
// where the exact value sits on a rounding boundary.
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {

// Whether the graph has a QLinearConv or QLinearMatMul node.
bool has_qlinear_layer(const graph::Graph& g);

// Returns the number of nodes rewritten.
int fuse_qlinear(graph::Graph& g, const PassContext& ctx);

}  // namespace twinfer::passes
