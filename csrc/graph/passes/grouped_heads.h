// K and V repeated per group of query heads, as Hugging Face's repeat_kv and
// FlexAttention's expansion (expand_flex_attention.cc) write them:
//
//   Reshape(Expand(Unsqueeze(x, axis 2), [B, Hkv, G, S, D]), [B, Hkv * G, S, D])
//
// Query head h reads head h / G of x. Passes that recognise the repeat read
// x itself instead (fuse_attention: the attention's grouped heads;
// matmul_reads_grouped_heads: the GEMM's rows), so nothing is repeated in
// memory.
#pragma once
#include <vector>

#include "graph/ir.h"

namespace twinfer::passes {

// x where `v` is x [B, Hkv, S, D] repeated G times per head as above, each
// step read by the next alone and `v` by `reader` alone, shapes concrete;
// else -1. The three nodes go into `remove`; `groups` (if given) gets G.
int grouped_source(const graph::Graph& g, const std::vector<std::vector<int>>& users, const std::vector<char>& dead,
                   int v, int reader, int64_t opset, std::vector<int>* remove, int64_t* groups = nullptr);

}  // namespace twinfer::passes
