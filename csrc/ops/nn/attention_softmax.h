// com.twinfer::AttentionSoftmax: the steps of attention between its two
// GEMMs as one op, for CPU plans (graph/passes/fuse_attention_softmax.cc):
//
//   y = Softmax(x * scale [+ mask], last axis)      [NaN elements -> 0]
//
// inputs:  x     float32 [..., S] (the scores of MatMul(q, k'))
//          mask  float32 (optional), broadcast onto x (never widening it)
// attributes: scale (float, default 1): the scalar factors exporters put on
//          q, on k' and on the scores, multiplied together;
//          nan_to_zero (int, default 0): the Where(IsNaN(p), 0, p) guard
//          PyTorch exports after the softmax (a row masked -inf everywhere
//          gives zeros, not NaN).
// output:  y     float32, x's shape.
//
// The CPU kernel (attention_softmax_rows.cc) takes each row while it is in
// cache: x * scale + mask with the row's max, exp and sum, the division and
// the NaN guard (softmax_rows.h, the loops the plain Softmax runs), where
// the exported graph made six passes over memory.
#pragma once

namespace twinfer::nn {

inline constexpr const char* kAttentionSoftmaxOp = "AttentionSoftmax";

}  // namespace twinfer::nn
