// Block-wide reductions for the row kernels (rows.cu, norms.cu): warp
// shuffles, then one warp over the warps' partial results. Every thread of
// the block must reach every call (no early return; CUDA_GUIDE.md section 3).
#pragma once
#include <cuda_runtime.h>

namespace twinfer_gpu {

constexpr int kRowThreads = 256;

// Reduces v over the block with op; `identity` fills the lanes of the last
// step that hold no warp's partial result.
template <typename A, typename F>
__device__ A block_reduce(A v, F op, A* shared, A identity) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // `shared` may still be read by the previous reduction
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  v = threadIdx.x < warps ? shared[threadIdx.x] : identity;
  if (warp == 0)
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (threadIdx.x == 0) shared[0] = v;
  __syncthreads();
  return shared[0];
}

struct SumOp {
  template <typename A> __device__ A operator()(A a, A b) const { return a + b; }
};
struct MaxOp {  // NaN is ignored, as std::max(m, NaN) keeps m on the CPU
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct MinOp {
  __device__ float operator()(float a, float b) const { return fminf(a, b); }
};

}  // namespace twinfer_gpu
