// ai.onnx.preview FlexAttention as the standard ops its definition is made
// of, so that it plans like any attention (MatMul, Softmax, MatMul: the
// attention fusion and the device kernels take it) instead of running the
// reference kernel with its score_mod / prob_mod evaluated per call:
//
//   K, V repeated over each group of query heads (Unsqueeze, Expand,
//   Reshape) when the heads may differ (GQA);
//   S = (Q * sqrt(scale)) @ (K * sqrt(scale))^T      in Q's type
//   S = score_mod(Cast(S, softmax_precision))        the subgraph spliced in
//   P = prob_mod(Softmax(S, axis 3))
//   Y = Cast(P @ Cast(V, softmax_precision), Q's type)
//
// scale defaults to 1/sqrt(head size). This is the order ONNX's function body
// computes in (scale split over Q and K), so results match its reference.
// A node whose Q type is not known, or whose subgraph reads a name nothing
// binds, stays for the reference kernel (ops/transformer/flex_attention.cc).
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {

bool has_flex_attention(const graph::Graph& g);
// Returns how many nodes were expanded.
int expand_flex_attention(graph::Graph& g, const PassContext& pc);

}  // namespace twinfer::passes
