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
// The CPU kernel (backends/cpu/onednn_attention_softmax.cc) writes
// x * scale + mask in one pass, runs oneDNN's softmax in place, the same
// primitive the plain Softmax uses, then the NaN pass: three passes over
// data in cache where the exported graph made six over memory.
#pragma once

namespace twinfer::nn {

inline constexpr const char* kAttentionSoftmaxOp = "AttentionSoftmax";

}  // namespace twinfer::nn
