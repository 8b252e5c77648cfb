// onnxruntime's attention contrib ops (com.microsoft), as its transformer
// optimizer writes them, rewritten into the standard Attention op (opset 23
// meaning; twinfer runs it at any opset) and the ops around it:
//
//   Attention(input, weights [, bias] [, mask_index] [, past] [, attention_bias])
//       -> MatMul [Add bias] -> Split(q, k, v) -> Attention(3-D, q/kv_num_heads)
//          (past [2, B, N, P, H] split into past_key / past_value; present
//          stacked back from present_key / present_value)
//   MultiHeadAttention(query, key, value [, bias] [, key_padding_mask]
//                      [, attention_bias] [, past_key, past_value])
//       -> [Add bias] -> Attention; key/value as [B, L, D], [B, N, L, H]
//          (4-D Attention), packed QKV [B, S, N, 3, H] or packed KV
//          [B, L, N, 2, H] (split and transposed)
//   GroupQueryAttention(query [, key, value] [, past_key, past_value], seqlens_k,
//                       total_sequence_length [, cos_cache, sin_cache] [, position_ids]
//                       [, attention_bias])
//       -> [Split packed QKV] -> heads first -> [RMSNormalization of Q and K:
//          q_norm_weight, k_norm_weight] -> [RotaryEmbedding at each row's
//          positions] -> present = past padded, new keys scattered at each
//          row's past length -> Attention (grouped heads) with a boolean mask
//          of the keys each query sees (causal, valid length, local window).
//          sliding_window_cache=1 keeps a growing cache (every key) where
//          onnxruntime keeps a window-sized one: the same answers when each
//          step's present is fed back as the next past, more memory.
//   RotaryEmbedding(input, position_ids, cos_cache, sin_cache)
//       -> RotaryEmbedding(input, cos_cache, sin_cache, position_ids), a
//          one-element position_ids (a start offset) made [B, S]
//
// The masks keep onnxruntime's meaning: a masked key gets mask_filter_value
// (default -10000) added to its score, not -inf. A row with every key masked
// gets the filter on every score there, a shift softmax ignores: such a row
// keeps all its keys instead (the same answer, also in 16 bits, where
// score + filter would round the scores away; a filter so large that float32
// loses the scores, -1e9, gives onnxruntime a plain average instead). mask_index may be key lengths
// [B], end and start positions [2B], or 0/1 flags [B, T] or [B, S, T]; its
// rank must be known at load (declared, or from shape inference over the
// nodes upstream).
// `unidirectional` is Attention's bottom-right causal mask, as onnxruntime's.
//
// Forms without a standard equivalent (Attention's do_rotary, a shared
// past/present buffer, beam-search cache indirection, the qk output, a 4-D
// Megatron mask, GroupQueryAttention's smooth_softmax and head_sink) are
// refused by name.
#pragma once
#include <cstdint>
#include <vector>

#include "graph/ir.h"

namespace twinfer::passes {

// Appends the replacement of `n` to `out` (the nodes built so far, which the
// rewrite reads to tell a mask's rank) and returns true when `n` is one of
// the ops above; throws kUnsupportedOp for a form it names as not covered.
bool expand_attention_contrib(graph::Graph& g, const graph::Node& n, std::vector<graph::Node>& out, int64_t opset);

}  // namespace twinfer::passes
