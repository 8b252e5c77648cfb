// The exact GELU as exporters spell it out, x * 0.5 * (1 + erf(x / sqrt(2)))
// (five nodes, four passes over memory), becomes one Gelu node; the MatMul
// epilogue fusion can then absorb it.
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {
int fuse_gelu(graph::Graph& g, const PassContext& ctx);
}
