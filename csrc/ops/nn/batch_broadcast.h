// Which matrix of a batched operand each output matrix reads, when the
// operand's batch dims broadcast against the output's in a way one stride
// cannot express (MatMul of [2, 1, M, K] by [1, 3, K, N]: A's batch index
// follows the first output dim only). The CUDA MatMul expands such an
// operand into scratch with it (backends/cuda/gemm_epilogue.cu) and hands
// cuBLASLt one matrix per batch; free of framework headers so device code
// can include it.
#pragma once
#include <cstdint>

#include "core/half.h"  // TWINFER_HD

namespace twinfer::nn {

struct BatchBroadcast {
  static constexpr int kMaxRank = 8;
  int rank = 0;
  int64_t y_dims[kMaxRank] = {};   // the output's batch dims
  int64_t strides[kMaxRank] = {};  // the operand's, in matrices; 0 where it has 1 and the output more
};

// The operand's matrix for output matrix `b` (row-major over y_dims).
TWINFER_HD int64_t source_batch(const BatchBroadcast& g, int64_t b) {
  int64_t src = 0;
  for (int d = g.rank - 1; d >= 0; --d) {
    const int64_t i = b % g.y_dims[d];
    b /= g.y_dims[d];
    src += i * g.strides[d];
  }
  return src;
}

// `src_batch` left-padded to `y_batch`'s rank, each dim equal or 1. False
// past kMaxRank dims.
inline bool make_batch_broadcast(const int64_t* src_batch, const int64_t* y_batch, int rank, BatchBroadcast* g) {
  if (rank > BatchBroadcast::kMaxRank) return false;
  g->rank = rank;
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    g->y_dims[d] = y_batch[d];
    g->strides[d] = src_batch[d] == 1 ? 0 : stride;
    stride *= src_batch[d];
  }
  return true;
}

}  // namespace twinfer::nn
