// Fusion rewrites into com.twinfer ops whose kernels apply bias, residual
// add and activation in the producing op's epilogue (one pass over memory
// instead of three). Each rule applies only when the backend has a kernel for
// the fused op, so a backend without them keeps the plain graph.
//
//   Conv [+ Add(residual)] [+ act]  ->  com.twinfer::Conv(activation, residual)
//   Conv -> Sigmoid -> Mul (SiLU)   ->  com.twinfer::Conv(activation="Silu")
//   MatMul(x, const W) + const bias [+ act] -> com.twinfer::MatMul(x, W, bias)
//   Gemm [+ act]                    ->  com.twinfer::Gemm(activation)
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {
int fuse_all(graph::Graph& g, const PassContext& ctx);
}
