// The exact GELU as exporters spell it out, x * 0.5 * (1 + erf(x / sqrt(2)))
// (five nodes, four passes over memory), becomes one Gelu node; so does the
// tanh form, x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))) (GPT-2's
// NewGELU, torch's gelu(approximate="tanh"): Gelu(approximate="tanh"), whose
// Pow no longer keeps the MLP float32 under fp16). The MatMul epilogue
// fusion can then absorb it.
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {
int fuse_gelu(graph::Graph& g, const PassContext& ctx);
}
