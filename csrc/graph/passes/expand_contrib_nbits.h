// onnxruntime's MatMulNBits (com.microsoft): a MatMul whose constant weight
// is stored in 2, 4 or 8 bits per element, block-wise along K, as its
// MatMulNBitsQuantizer writes it and the int4 language models built for
// onnxruntime (and transformers.js's q4 files) carry it:
//
//   MatMulNBits(A [..., K], B uint8 [N, K/block, block*bits/8], scales [N, K/block]
//               [, zero_points] [, g_idx] [, bias [N]]; K, N, bits, block_size)
//       -> MatMul(A, W [K, N]) [Add bias], W dequantized once at load in the
//          scales' type: W[k, n] = (q - zero) * scale of k's block, q taken
//          lowest bits first from the byte; zero from zero_points packed like
//          B (uint8) or given in the scales' type, else 2^(bits-1)
//
// So such a model loads and computes what onnxruntime computes, at the
// float weight's size (4-bit weights grow 8x in float32, 4x in fp16). A
// non-constant weight, g_idx (act-order) and bits 3, 5, 6, 7 are refused by
// name.
#pragma once
#include <cstdint>
#include <vector>

#include "graph/ir.h"

namespace twinfer::passes {

// Appends the replacement of `n` to `out` and returns true when `n` is a
// MatMulNBits; throws kUnsupportedOp for a form it does not cover.
bool expand_matmul_nbits(graph::Graph& g, const graph::Node& n, std::vector<graph::Node>& out, int64_t opset);

}  // namespace twinfer::passes
