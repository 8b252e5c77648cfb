// Conv followed by an Add of a constant that is one value per output channel
// ([1, M, 1, 1], [M, 1, 1], or one value for all) becomes one Conv whose bias
// holds the sum: paddle2onnx writes every convolution's bias that way
// (PP-OCRv6's detector: 60 Adds, each a pass over a feature map, and each
// keeping the convolution from its activation's epilogue).
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {
int fold_conv_add(graph::Graph& g, const PassContext& ctx);
}
