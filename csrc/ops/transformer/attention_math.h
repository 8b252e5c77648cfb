// Attention's index and masking rules, shared by the CPU kernel
// (attention.cc) and CUDA's (backends/cuda/attention.cu), so the CPU tests
// exercise the rules the GPU runs. No framework headers: nvcc includes it as
// it is.
#pragma once
#include <cstdint>

#include "core/half.h"

namespace twinfer::tx {

// Strides over (b, h, s) of a [B, H, S, D] view (d contiguous) of a 4-D
// [B, H, S, D] tensor or a 3-D [B, S, H * D] one (packed heads).
struct AttnStrides {
  int64_t b, h, s;
};

TWINFER_HD AttnStrides attn_strides(bool in3d, int64_t H, int64_t S, int64_t D) {
  return in3d ? AttnStrides{S * H * D, D, H * D} : AttnStrides{H * S * D, S * D, D};
}

// Where query row i stands among the keys (bottom-right alignment): the past
// length with an in-op cache, nonpad_kv_seqlen[b] - Sq with padding lengths,
// else 0.
TWINFER_HD int64_t attn_query_offset(bool has_past, int64_t past, bool has_nonpad, int64_t nonpad_b, int64_t Sq) {
  return has_past ? past : (has_nonpad ? nonpad_b - Sq : 0);
}

// Whether key j is hidden from query row i (at offset `off`) by causal
// masking, the sliding window (left / right: -1 unbounded) or padding
// (keys at or after `valid`).
TWINFER_HD bool attn_key_hidden(int64_t i, int64_t j, int64_t off, bool causal, int64_t left, int64_t right,
                                int64_t valid) {
  const int64_t diff = i + off - j;
  return (causal && diff < 0) || (left >= 0 && diff > left) || (right >= 0 && -diff > right) || j >= valid;
}

}  // namespace twinfer::tx
