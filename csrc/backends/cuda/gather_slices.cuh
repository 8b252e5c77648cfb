// y[o, j, :] = x[o, idx[j], :]: the slices of x along an axis (outer dims
// before it, inner elements after it) picked by a device index list, their
// elements of U (a width: dispatch_width) moved as they are. Compress and
// Unique write their outputs with it.
#pragma once
#include <cstdint>

namespace twinfer_gpu {

template <typename U>
__global__ void gather_slices(const U* __restrict__ x, int64_t outer, int64_t n, int64_t k, int64_t inner,
                              const int64_t* __restrict__ idx, U* __restrict__ y) {
  const int64_t total = outer * k * inner;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e % inner, j = (e / inner) % k, o = e / (inner * k);
    y[e] = x[(o * n + idx[j]) * inner + i];
  }
}

// The grid for gather_slices over `total` elements (256 threads a block).
inline uint32_t gather_slices_grid(int64_t total) {
  const int64_t blocks = (total + 255) / 256;
  return static_cast<uint32_t>(blocks < (1 << 16) ? blocks : (1 << 16));
}

}  // namespace twinfer_gpu
