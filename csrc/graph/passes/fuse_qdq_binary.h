// QDQ fusion of elementwise Add and Mul in imported QDQ graphs:
//   DequantizeLinear(a_q), DequantizeLinear(b_q) -> Add | Mul [-> Relu] -> QuantizeLinear
// becomes com.twinfer::QBinary (ops/quant/qbinary.h), one pass over the
// integers instead of two dequantizes, the float op and a quantize. Same
// integers out: QBinary computes the same float32 expression in the same order.
//
// Conditions: both inputs dequantized per tensor (constant scale and zero
// point), every reader of the result a QuantizeLinear with one and the same
// per-tensor parameters and a zero point input (its type is the output's),
// none of them a graph output; a Relu in between must be the op's sole reader.
// ResNet's residual Add + Relu, a transformer's residual / mask Adds and GELU
// Muls take this road, in imported QDQ models and in precision="int8" engines.
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {

// Returns the number of Add/Mul nodes fused.
int fuse_qdq_binary(graph::Graph& g, const PassContext& ctx);

}  // namespace twinfer::passes
