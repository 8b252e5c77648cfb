// Device plans add a transformer's skip connection inside the GEMM before
// it (plan time, concrete shapes, after lower_precision, before
// fuse_elementwise).
//
//   y = MatMul(x, W) [+ bias];  z = Add(y, r)   (r of y's shape)
//   → z = com.twinfer::MatMul(x, W, bias, r)
//
// On a GPU the Add is a launch and a full trip through memory (read y and
// r, write z); cuBLASLt adds r as its C operand (beta 1) while it writes the
// product, so z is written once. BERT and ViT have two per layer (after the
// attention projection and after the MLP). Only where y has no activation
// (act(x W + b) + r is not what cuBLASLt computes) and nobody else reads y.
#pragma once
#include <functional>

#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {

struct FuseResidualOptions {
  NodeSupport supports;  // does the fused node have kernels
};

// Whether device plans fuse residuals: yes, unless TWINFER_FUSE_RESIDUAL=0
// (for measuring what it saves).
bool residual_fusion_wanted();

// Returns the number of Adds taken into a MatMul (0: the graph is unchanged).
int fuse_residual(graph::Graph& g, const FuseResidualOptions& o, const PassContext& ctx);

}  // namespace twinfer::passes
