// The scores -> Softmax -> probabilities chain of scaled dot-product
// attention as exporters spell it out (PyTorch's scaled_dot_product_attention
// in ONNX, BERT- and ViT-style):
//
//   s = MatMul(q [* c1], k' [* c2]) [/ c or * c] [+ mask]
//   p = Softmax(s, last axis) [then Where(IsNaN(p), 0, p)]
//
// and, where the caller takes 16-bit chains, the same in float16 / bfloat16
// with the softmax either in that type or in float32 between two Casts
// (PyTorch's softmax(s, dtype=float32).to(s.dtype), as Hugging Face's eager
// attention writes it):
//
//   p = Cast(Softmax(Cast(s, float32)), s's type)
//
// matched once here for the two passes that rewrite it: fuse_attention (a
// device plan: the whole attention becomes one op) and fuse_attention_softmax
// (a CPU plan: the GEMMs stay oneDNN's, the steps between them become one).
#pragma once
#include <vector>

#include "graph/ir.h"

namespace twinfer::passes {

struct SoftmaxChain {
  int softmax = -1;                        // the Softmax node
  int probs = -1;                          // the probabilities as their reader sees them (the guard's output)
  int guard_isnan = -1, guard_where = -1;  // Where(IsNaN(p), 0, p), or -1
  int mask_add = -1, mask = -1;            // the Add node and the mask value, or -1
  int scaler = -1;                         // the Div / Mul by a constant, or -1
  int scores_matmul = -1;                  // MatMul(q', k') producing the scores
  int q = -1, k = -1;                      // its operands, behind the scalar Muls below
  int q_mul = -1, k_mul = -1;              // Mul(q, c1) / Mul(k, c2), or -1
  int cast_in = -1, cast_out = -1;         // the Casts to float32 and back around the Softmax, or -1
  double scale = 1.0;                      // c1 * c2 * (the scaler's factor)

  // The chain's nodes between the scores MatMul and the probabilities'
  // reader (the Muls, the scaler, the Add, the Softmax, the guard).
  std::vector<int> between() const;
};

// Whether the Softmax node `softmax` ends such a chain, each intermediate
// value read by the chain alone (not a graph output) and no node in `dead`:
// float32 (or, with `sixteen_bit`, float16 / bfloat16 scores too), over the
// last axis, the scores made by a MatMul. `users`: value_users(g).
// The node producing v when v is read by `reader` alone (and is not a graph
// output), or -1; nodes flagged in `dead` do not count.
int sole_producer(const graph::Graph& g, const std::vector<std::vector<int>>& users, const std::vector<char>& dead,
                  int v, int reader);

bool match_softmax_chain(const graph::Graph& g, const std::vector<std::vector<int>>& users,
                         const std::vector<char>& dead, int opset, int softmax, SoftmaxChain* out,
                         bool sixteen_bit = false);

}  // namespace twinfer::passes
