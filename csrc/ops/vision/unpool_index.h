// MaxUnpool's index math, shared by the CPU kernel (scatter_ops.cc) and the
// CUDA one (backends/cuda/unpool.cu): an index addresses the default
// unpooled shape [N, C, (in - 1) * stride + kernel - pads] flat, as
// MaxPool's Indices address its input; an explicit output_shape keeps the
// index's coordinates (as onnxruntime).
#pragma once
#include <cstdint>

#include "core/half.h"  // TWINFER_HD

namespace twinfer::vision {

constexpr int64_t kUnpoolOutOfRange = -1;   // the index is outside the default shape
constexpr int64_t kUnpoolOutsideOut = -2;   // its coordinates are outside the output

// The output element index `v` lands on, or one of the codes above: `dflt`
// the default unpooled shape (`total` elements), `out` the output's (both of
// `rank` dims), `same` when they are equal.
TWINFER_HD int64_t unpool_target(int64_t v, int rank, const int64_t* dflt, const int64_t* out, int64_t total,
                                 bool same) {
  if (v < 0 || v >= total) return kUnpoolOutOfRange;
  if (same) return v;
  int64_t off = 0, mul = 1;
  for (int d = rank; d-- > 0;) {
    const int64_t c = v % dflt[d];
    v /= dflt[d];
    if (c >= out[d]) return kUnpoolOutsideOut;
    off += c * mul;
    mul *= out[d];
  }
  return off;
}

// The shapes by value, for a kernel's arguments (the CUDA kernel's).
constexpr int kMaxUnpoolRank = 8;
struct UnpoolGeom {
  int rank = 0;
  int64_t dflt[kMaxUnpoolRank] = {};
  int64_t out[kMaxUnpoolRank] = {};
  int64_t total = 0;
  bool same = true;
};

TWINFER_HD int64_t unpool_target(int64_t v, const UnpoolGeom& g) {
  return unpool_target(v, g.rank, g.dflt, g.out, g.total, g.same);
}

}  // namespace twinfer::vision
