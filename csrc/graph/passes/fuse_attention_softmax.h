// CPU plans: the steps of attention between its two GEMMs,
//
//   MatMul(q [* c1], k' [* c2]) [/ c or * c] [+ mask] -> Softmax [-> Where(IsNaN(p), 0, p)]
//
// (softmax_chain.h) become MatMul(q, k') -> com.twinfer::AttentionSoftmax
// (scale = c1 * c2 * c, the mask, the guard as nan_to_zero): the GEMMs stay
// oneDNN's, and the scores go through memory once instead of six times. A
// device plan fuses the whole attention instead (fuse_attention.h).
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {
int fuse_attention_softmax(graph::Graph& g, const PassContext& ctx);
}
