// Conv followed by inference BatchNormalization becomes one Conv with scaled
// weights and a shifted bias:  w' = w * s,  b' = (b - mean) * s + beta,
// where s = gamma / sqrt(var + eps) per output channel.
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {
int fold_conv_bn(graph::Graph& g, const PassContext& ctx);
}
