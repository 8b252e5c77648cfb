// A permutation of a GEMM's rows commutes with the GEMM: x W (a 2-D W, a
// bias along N, an activation) treats each row of x alone. So a Transpose
// that only moves rows (its last axis stays last) can go to the other side
// of a MatMul or Gemm. graph/passes/attention_views.cc uses this to bring
// the transposes ViT puts around its attention projections ([B, S] to
// [S, B] order before the packed QKV projection, back after the output
// projection) next to the attention, where its views absorb them.
#pragma once
#include <vector>

#include "graph/ir.h"

namespace twinfer::passes {

// Node `mm` is a MatMul (ai.onnx or com.twinfer) of a 2-D B whose input 0 is
// a row-moving Transpose read by nothing else: the MatMul then reads the
// Transpose's input and the Transpose moves the product's rows instead
// (same output value). False, graph unchanged, when the pattern is not there.
// `users`: value_users(g) as the graph is now.
bool transpose_rows_after_gemm(graph::Graph& g, const std::vector<std::vector<int>>& users, int mm);

// Node `gemm` is a Gemm (transA 0, C absent or one row) or a MatMul of 2-D
// operands whose output goes through a Reshape-like node that keeps its last
// dim and then a row-moving Transpose, each read by nothing else: the rows
// are moved before the GEMM instead (Reshape, Transpose, Reshape of its
// input) and a Reshape of its product gives the Transpose's output value.
bool transpose_rows_before_gemm(graph::Graph& g, const std::vector<std::vector<int>>& users, int gemm);

}  // namespace twinfer::passes
