// onnxruntime's normalization contrib ops, as its transformer optimizer
// writes them, rewritten into standard ops:
//
//   SkipLayerNormalization(x, skip, gamma [, beta] [, bias])
//       -> Add(x, skip) [Add bias] -> LayerNormalization(axis=-1)
//          (outputs mean, inv_std_var, the sum, when read)
//   SkipSimplifiedLayerNormalization(x, skip, gamma [, bias])
//       -> Add(x, skip) [Add bias] -> RMSNormalization(axis=-1) (the sum
//          when read)
//   SimplifiedLayerNormalization(x, scale)   (onnxruntime puts it in the
//       default domain) -> RMSNormalization
//   EmbedLayerNormalization(input_ids, [segment_ids], word_embedding,
//       position_embedding, [segment_embedding], gamma, beta, [mask],
//       [position_ids])
//       -> Gather per table, Add -> LayerNormalization; mask_index, when
//          read, counts each row's mask entries equal to 1 (zeros without a
//          mask), as onnxruntime does; embedding_sum is the sum
//
// The RMS forms' inverse-deviation outputs have no standard equivalent and
// are refused by name when read.
#pragma once
#include <cstdint>
#include <vector>

#include "graph/ir.h"

namespace twinfer::passes {

// Appends the replacement of `n` to `out` and returns true when `n` is one
// of the ops above; throws kUnsupportedOp for a form it names as not covered.
bool expand_norm_contrib(graph::Graph& g, const graph::Node& n, std::vector<graph::Node>& out, int64_t opset);

}  // namespace twinfer::passes
