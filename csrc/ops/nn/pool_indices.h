// MaxPool's optional Indices output: where in X each window's maximum sits,
// as one flat index. Shared by the CPU loop kernel (pool.cc) and the CUDA
// one (backends/cuda/pool.cu), so both count positions the same way; free of
// framework headers so device code can include it.
#pragma once
#include <cstdint>

#include "core/half.h"  // TWINFER_HD

namespace twinfer::nn {

// Input position (d, h, w) of the (n, c) plane that starts at element
// `plane_base` of X, whose spatial dims are (in_d, in_h, in_w) (missing
// leading dims of size 1). Row-major within the plane; with storage_order=1
// column-major, the first spatial dim fastest, as onnxruntime counts it.
TWINFER_HD int64_t max_pool_index(int64_t plane_base, int64_t d, int64_t h, int64_t w, int64_t in_d,
                                         int64_t in_h, int64_t in_w, bool column_major) {
  return plane_base + (column_major ? d + (h + w * in_h) * in_d : (d * in_h + h) * in_w + w);
}

}  // namespace twinfer::nn
