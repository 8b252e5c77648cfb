// A node whose 16-bit float values (float16 / bfloat16) no kernel of its
// backend takes, but whose float32 form one does, runs in float32 with Casts
// around it: models exported after `.half()` hold BatchNormalization,
// InstanceNormalization, GroupNormalization, ConvTranspose, LRN... in fp16,
// which the CPU kernels compute in float32 or float64 only. The node's
// outputs keep their 16-bit type (a Cast back), so the rest of the graph and
// the model's outputs are as the model says; 16-bit constants it reads are
// widened once, at plan build. Nodes with a kernel for their types, and
// nodes without one in float32 either (reported as before), stay.
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {

// `supports`: whether a node has a kernel, asked of a one-node graph.
// Returns the number of nodes that now compute in float32.
int widen_to_float32(graph::Graph& g, const NodeSupport& supports);

}  // namespace twinfer::passes
