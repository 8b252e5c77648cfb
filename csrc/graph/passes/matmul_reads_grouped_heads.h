// MatMul(a, b) where b is K or V [B, Hkv, S, D] repeated per group of G
// query heads (grouped_heads.h), directly or through steps that commute with
// the repeat (a Transpose swapping the last two axes: the scores' Q x K^T; a
// Cast; a Mul or Div by one element: FlexAttention's scale), and a is
// [B, Hkv * G, M, K]:
//
//   Reshape(MatMul(Reshape(a, [B, Hkv, G * M, K]), steps(x)), [B, Hkv * G, M, N])
//
// Query head h = j * G + g is row block g of group j, so each group's G heads
// become one GEMM's rows against its K/V head read once: the repeated copy
// (G times the cache, written every decode step) is gone, and the Reshapes
// are views. For the GEMMs a plan's attention fusion left (every CPU
// plan's: its AttentionSoftmax keeps oneDNN's GEMMs around it; a device
// plan's unfused 16-bit chains). TWINFER_MATMUL_READS_GROUPED_HEADS=0 turns
// it off.
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {

int matmul_reads_grouped_heads(graph::Graph& g, const PassContext& pc);

}  // namespace twinfer::passes
