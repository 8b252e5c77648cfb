// Scaled dot-product attention as exporters spell it out (PyTorch's
// scaled_dot_product_attention in ONNX, BERT- and ViT-style):
//
//   s = MatMul(q [* c1], Transpose(k) [* c2]) [/ c or * c] [+ mask]
//   p = Softmax(s, last axis) [then Where(IsNaN(p), 0, p)]
//   o = MatMul(p, v)
//
// (matched by softmax_chain.h) becomes one com.twinfer::Attention(q, k, v,
// mask) with scale = the product of the constants (ONNX Attention's
// semantics, opset 23: 4-D [B, H, S, D] operands, an additive mask broadcast
// onto [B, H, Sq, Sk], a row with no attendable key gives zeros, as the
// Where(IsNaN) guard does; without the guard the unfused graph gave NaN
// there, a row masked -inf everywhere being the one place the fused op
// differs). Device plans only: on a GPU the scores never go to memory; the
// CPU keeps its GEMMs and fuses what lies between them
// (fuse_attention_softmax.h).
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {
int fuse_attention(graph::Graph& g, const PassContext& ctx);
}
