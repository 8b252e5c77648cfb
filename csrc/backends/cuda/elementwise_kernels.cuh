// The device side of the elementwise family: a few grid-stride kernel
// templates around the shared functors (ops/elementwise/functors.h,
// binary_functors.h) and the host-tested index math (offset_calc.h). The
// functor arrives lifted to storage types (Lift1/Lift2: load 16-bit floats
// into float, compute, round back), so these bodies are a few lines.
//
// All kernels live in namespace twinfer_gpu, so tools can pick them out by
// name (compute-sanitizer --kernel-name kns=twinfer_gpu).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/elementwise/launch_config.h"
#include "ops/elementwise/offset_calc.h"
#include "ops/elementwise/scalar.h"

namespace twinfer_gpu {

using twinfer::ew::OffsetCalc;

__device__ __forceinline__ int64_t first_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// y[i] = f(a[i]) over contiguous operands.
template <typename F, typename O, typename A>
__global__ void unary_flat(int64_t n, const A* __restrict__ a, O* __restrict__ y, F f) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] = f(a[i]);
}

// y[i] = f(a[i], b[i]) when neither operand broadcasts.
template <typename F, typename O, typename A, typename B>
__global__ void binary_flat(int64_t n, const A* __restrict__ a, const B* __restrict__ b, O* __restrict__ y, F f) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] = f(a[i], b[i]);
}

// y[i] = f(a[off0], b[off1]) with numpy broadcasting.
template <typename F, typename O, typename A, typename B>
__global__ void binary_bcast(int64_t n, OffsetCalc<2> calc, const A* __restrict__ a, const B* __restrict__ b,
                             O* __restrict__ y, F f) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    int64_t off[2];
    calc.get(static_cast<uint64_t>(i), off);
    y[i] = f(a[off[0]], b[off[1]]);
  }
}

// y[i] = f(a[off0], b[off1], c[off2]) (Where, Clip with tensor bounds).
template <typename F, typename O, typename A, typename B, typename C>
__global__ void ternary_bcast(int64_t n, OffsetCalc<3> calc, const A* __restrict__ a, const B* __restrict__ b,
                              const C* __restrict__ c, O* __restrict__ y, F f) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    int64_t off[3];
    calc.get(static_cast<uint64_t>(i), off);
    y[i] = f(a[off[0]], b[off[1]], c[off[2]]);
  }
}

}  // namespace twinfer_gpu
