// onnxruntime's contrib ops (domain com.microsoft) that its transformer
// optimizer and its quantizer write into the models they save, rewritten
// into standard ONNX ops before anything else looks at the graph, so such
// files load and the usual folding and fusion apply to them:
//
//   FastGelu(x [, bias])             -> [Add] Gelu(approximate="tanh")
//   Gelu(x), BiasGelu(x, bias)       -> [Add] Gelu
//   QuickGelu(x; alpha)              -> x * Sigmoid(alpha * x)
//   BiasAdd(x, bias, skip)           -> Add, Add
//   BiasSplitGelu(x, bias)           -> Add, Split in halves, left * Gelu(right)
//   GemmFastGelu(x, W [, bias])      -> MatMul [Add] Gelu(approximate="tanh")
//   FusedMatMul(a, b; alpha, transA, transB)
//                                    -> MatMul, or Einsum for the transposes; Mul(alpha)
//   DynamicQuantizeLSTM(x, W_q, R_q, ..., W_scale, W_zero, R_scale, R_zero)
//                                    -> LSTM with W, R dequantized at load
//   the normalizations (SkipLayerNormalization, SkipSimplifiedLayerNormalization,
//   SimplifiedLayerNormalization, EmbedLayerNormalization): expand_contrib_norms.h
//   Attention, MultiHeadAttention, RotaryEmbedding: expand_contrib_attention.h
//   MatMulNBits (2/4/8-bit block-quantized weights): expand_contrib_nbits.h
//   the quantizer's QOperator ops (QLinearAdd, QGemm, ...): expand_contrib_quant.h
//
// A node whose form is not covered (batch transposes, non-constant
// quantized weights) stays as it is, and is reported as unsupported; the
// attention and normalization rewrites name the part they do not cover.
#pragma once
#include "graph/ir.h"

namespace twinfer::passes {

inline constexpr const char* kOnnxruntimeDomain = "com.microsoft";

// Rewrites the covered contrib nodes of `g` and of its subgraphs; returns
// how many. Runs before the unsupported-op check. `opset`: the model's
// ai.onnx opset, which the standard ops written in their place follow.
int expand_contrib_ops(graph::Graph& g, int64_t opset);

}  // namespace twinfer::passes
