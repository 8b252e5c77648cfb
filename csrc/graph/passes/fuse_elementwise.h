// Device plans run chains of float elementwise ops as one kernel (plan
// time, concrete shapes, after lower_precision and channels_last, before
// placement).
//
// On a GPU each elementwise op is a launch and a full trip through memory;
// a chain such as a decomposed LayerNorm's tail, a detector head's box
// decoding (Sigmoid, Mul, Sub, Add, Mul) or x * Sigmoid(x) is bound by
// those trips. This pass finds connected groups of such ops whose inner
// values nobody else reads and replaces each group by one
// com.twinfer::FusedElementwise node (ops/elementwise/fused_chain.h), whose
// inputs are the group's outside operands, broadcast to its output.
//
// A group grows from its last node towards its producers; a producer joins
// when every reader of its output is in the group and that output is not a
// graph output, within kChainMaxInputs inputs and kChainMaxSteps ops. Ops:
// the unary math and activations the chain knows (Clip with constant
// scalar bounds), Add/Sub/Mul/Div/Pow/Max/Min/PRelu, all in one float
// dtype (float32, float16, bfloat16). A group of one op stays as it is.
#pragma once
#include <functional>

#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {

struct FuseElementwiseOptions {
  NodeSupport supports;  // does the fused node have kernels
};

// Whether device plans fuse elementwise chains: yes, unless
// TWINFER_FUSE_ELEMENTWISE=0 (read each time a plan is built; for measuring
// what fusion saves, not a production switch).
bool elementwise_fusion_wanted();

// Returns the number of nodes fused away (0: the graph is unchanged).
int fuse_elementwise(graph::Graph& g, const FuseElementwiseOptions& o, const PassContext& ctx);

}  // namespace twinfer::passes
