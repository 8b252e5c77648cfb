// Shape/type inference interleaved with constant folding, in topological order:
// each node's rule runs, and when all its inputs are constants the CPU kernel
// computes its outputs right away, so later rules see them (Shape -> Gather ->
// Concat -> Reshape chains resolve once input dims are concrete).
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {

// Returns the number of nodes folded. Throws kUnsupportedOp when a node has no
// shape rule (the caller checks support first, listing every missing op).
int infer_and_fold(graph::Graph& g, const PassContext& ctx, bool fold = true);

// True for ops that must not be folded even with constant inputs.
bool is_unfoldable(const graph::Node& n);

// Runs the node's CPU kernel on its constant inputs (a dims-only op on its
// input's dims) and stores the outputs as constants; false when no kernel
// takes the node. `dynamic`: output shapes are unknown, only kernels that
// allocate their own outputs can run.
bool fold_node(graph::Graph& g, const graph::Node& n, const PassContext& ctx, bool dynamic = false);

}  // namespace twinfer::passes
