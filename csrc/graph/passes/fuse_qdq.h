// QDQ fusion: maps the quantized patterns of a QDQ graph (the ones
// insert_qdq builds for precision="int8", and the ones onnxruntime's
// quantize_static and similar tools export) onto int8 kernels:
//
//   DequantizeLinear(x_q) -> MatMul | Gemm | Conv <- DequantizeLinear(w_q const)
//        [+ bias: Conv/Gemm input, or Add of a constant / DequantizeLinear(int32 const)]
//        [-> Relu | Clip | LeakyRelu | Sigmoid | Tanh | HardSwish | Gelu]
//        [-> QuantizeLinear]
//   ->  com.twinfer::QMatMul | QConv (ops/quant/qlinear_fused.h)
//
// Conditions: x_q is uint8/int8 with one scale and zero point; w_q is a
// constant int8 tensor with per-tensor or per-output-channel scales and zero
// points 0; Gemm has transA = 0 (alpha is folded into the weight scales, beta
// into the bias). The QuantizeLinear joins the fused node only when every
// reader of the float result is a QuantizeLinear with the same constant
// scale and zero point; otherwise the node outputs float32 and those
// QuantizeLinear nodes stay (they are cheap). The DequantizeLinear of x stays
// for any other reader and is dropped as dead code otherwise.
//
// Run it before constant folding turns DequantizeLinear(w_q) into a float
// constant: on a pre-quantized model before the first folding, on an
// insert_qdq graph right after that pass.
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {

// Returns the number of nodes fused.
int fuse_qdq(graph::Graph& g, const PassContext& ctx);

// True when the graph has a DequantizeLinear node (a pre-quantized model).
bool has_dequantize(const graph::Graph& g);

}  // namespace twinfer::passes
