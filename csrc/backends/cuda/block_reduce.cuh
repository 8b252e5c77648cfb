// Block-wide reductions for the row kernels (rows.cu, norms.cu): warp
// shuffles, then one warp over the warps' partial results. Every thread of
// the block must reach every call (no early return; CUDA_GUIDE.md section 3).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/elementwise/scalar.h"

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
// fmax / fmin in the operands' own precision (float or double).
__device__ __forceinline__ float max_of(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ double max_of(double a, double b) { return fmax(a, b); }
__device__ __forceinline__ float min_of(float a, float b) { return fminf(a, b); }
__device__ __forceinline__ double min_of(double a, double b) { return fmin(a, b); }
// int32 (rows.cu instantiates its reductions for int32 ReduceSum, which never takes these).
__device__ __forceinline__ int32_t max_of(int32_t a, int32_t b) { return a > b ? a : b; }
__device__ __forceinline__ int32_t min_of(int32_t a, int32_t b) { return a < b ? a : b; }

struct MaxOp {  // NaN is ignored, as std::max(m, NaN) keeps m on the CPU
  template <typename A> __device__ A operator()(A a, A b) const { return max_of(a, b); }
};
struct MinOp {
  template <typename A> __device__ A operator()(A a, A b) const { return min_of(a, b); }
};

// The mean of a row of len values and the sum of their squared deviations
// from it, over the block: two passes, as the CPU's ops/nn/norm_stats.h
// (no cancellation from E[x^2] - E[x]^2). `shared`: 32 floats.
template <typename T>
__device__ void block_mean_m2(const T* __restrict__ xr, int64_t len, float* shared, float* mean, float* m2) {
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < len; i += blockDim.x) s += twinfer::ew::load(xr[i]);
  *mean = block_reduce(s, SumOp{}, shared, 0.f) / static_cast<float>(len);
  float q = 0.f;
  for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
    const float t = twinfer::ew::load(xr[i]) - *mean;
    q += t * t;
  }
  *m2 = block_reduce(q, SumOp{}, shared, 0.f);
}

}  // namespace twinfer_gpu
