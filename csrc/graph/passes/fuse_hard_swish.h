// HardSwish as exporters spell it out becomes one HardSwish node:
//   x * Clip(x + 3, 0, 6) / 6         (paddle2onnx; also * (1/6) after the
//                                      product, or the / 6 before it)
//   x * HardSigmoid(x, 1/6, 1/2)      (torch before opset 14)
// Four nodes and four passes over memory become one, which the convolution
// and GEMM epilogue fusions then take (PP-OCR's PP-LCNet classifiers: 18 of
// them split the blocked layout's chains, a reorder out and in each).
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {
int fuse_hard_swish(graph::Graph& g, const PassContext& ctx);
}
