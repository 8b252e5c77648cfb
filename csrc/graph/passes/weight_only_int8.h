// Weight-only int8 (twinfer.load(..., weights="int8")): the constant float32
// weights of MatMul / Gemm (plain, or the fused com.twinfer forms with bias
// and activation) become int8 per output channel (symmetric, scale =
// max|w| / 127) and the node becomes com.twinfer::MatMulW8, which
// dequantizes them inside its GEMM (backends/cpu/onednn_matmul_w8.cc). Activations
// stay float32. Run after fuse_all, so bias and activation come along.
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {

// Returns the number of nodes rewritten.
int quantize_weights_int8(graph::Graph& g, const PassContext& ctx);

}  // namespace twinfer::passes
