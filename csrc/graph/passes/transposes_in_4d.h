// The last two axes of a 4-D tensor swapped through 3-D, as torch's dynamo
// exporter decomposes scaled_dot_product_attention's K^T:
//
//   Reshape(Transpose(Reshape(u, [a * b, S, D]), [0, 2, 1]), [a, b, D, S])
//
// becomes Transpose(u', [0, 1, 3, 2]), u' = u where u is [a, b, S, D], else
// Reshape(u, [a, b, S, D]) (u of any rank whose last two dims are S, D: the
// 5-D Expand of a repeat_kv whose Reshape to heads the exporter folded into
// the flattening). The attention passes then meet K^T in the form they know
// (fuse_attention.h, matmul_reads_grouped_heads.h, grouped_heads.h). Each
// intermediate value must have that one reader.
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {

int transposes_in_4d(graph::Graph& g, const PassContext& pc);

}  // namespace twinfer::passes
