// MaxUnpool's index math, shared by the CPU kernel (scatter_ops.cc) and the
// CUDA one (backends/cuda/unpool.cu): an index addresses the default
// unpooled shape [N, C, (in - 1) * stride + kernel - pads] flat, as
// MaxPool's Indices address its input; an explicit output_shape keeps the
// index's coordinates (as onnxruntime).
#pragma once
#include <cstdint>

#include "core/half.h"  // TWINFER_HD

namespace twinfer::vision {

constexpr int kMaxUnpoolRank = 8;

struct UnpoolGeom {
  int rank = 0;
  int64_t dflt[kMaxUnpoolRank] = {};  // the default unpooled shape
  int64_t out[kMaxUnpoolRank] = {};   // the output's
  int64_t total = 0;                  // elements of dflt
  bool same = true;                   // out == dflt
};

constexpr int64_t kUnpoolOutOfRange = -1;   // the index is outside dflt
constexpr int64_t kUnpoolOutsideOut = -2;   // its coordinates are outside out

// The output element index `v` lands on, or one of the codes above.
TWINFER_HD int64_t unpool_target(int64_t v, const UnpoolGeom& g) {
  if (v < 0 || v >= g.total) return kUnpoolOutOfRange;
  if (g.same) return v;
  int64_t off = 0, mul = 1;
  for (int d = g.rank; d-- > 0;) {
    const int64_t c = v % g.dflt[d];
    v /= g.dflt[d];
    if (c >= g.out[d]) return kUnpoolOutsideOut;
    off += c * mul;
    mul *= g.out[d];
  }
  return off;
}

}  // namespace twinfer::vision
