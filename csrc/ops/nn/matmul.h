// MatMul (numpy matmul semantics) and Gemm geometry shared by the reference
// kernels and the oneDNN ones.
//
// com.twinfer MatMul: inputs (A, B, [bias], [residual]) with bias of shape
// [N] added along the last dim and residual of y's shape added whole, then
// `activation` (activation.h): y = act(A@B + bias + residual). The residual
// is the skip connection a transformer adds after its projections; on a GPU
// it rides in cuBLASLt's C operand (graph/passes/fuse_residual.h).
// com.twinfer Gemm: Gemm's inputs and attributes plus `activation`:
// y = act(alpha*A'B' + beta*C).
#pragma once
#include <cstdint>

#include "core/shape.h"
#include "ops/kernel.h"
#include "ops/nn/activation.h"

namespace twinfer::nn {

struct MatMulGeom {
  Shape a, b;             // the inputs as given
  Shape a_batch, b_batch; // batch dims of A and B, left-padded with 1s to y_batch's rank
  Shape y_batch;          // broadcast batch dims
  int64_t M = 1, K = 1, N = 1;
  Shape y;                // output shape (1-D operands' unit dims removed)
  bool has_bias = false;  // com.twinfer MatMul only
  bool has_residual = false;  // com.twinfer MatMul only: input 3, of shape y
  Activation act;
};

MatMulGeom matmul_geom(const KernelBuildInfo& info);

struct GemmGeom {
  int64_t M = 0, K = 0, N = 0;
  bool trans_a = false, trans_b = false;
  float alpha = 1.f, beta = 1.f;
  bool has_c = false;
  Shape c;                // C's shape as given (unidirectionally broadcastable to [M, N])
  Activation act;
};

GemmGeom gemm_geom(const KernelBuildInfo& info);

// C's shape as 2-D [rows, cols] with rows in {1, M}, cols in {1, N}.
Shape gemm_c_2d(const Shape& c);

}  // namespace twinfer::nn
