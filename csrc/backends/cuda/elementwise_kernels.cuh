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

template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

__host__ __device__ constexpr size_t max_size(size_t a) { return a; }
template <typename... R>
__host__ __device__ constexpr size_t max_size(size_t a, size_t b, R... r) { return max_size(a > b ? a : b, r...); }

// Elements a thread of the flat kernels takes at once: 16 bytes of the
// widest operand (one vector load or store each), at most 8.
template <typename... T>
__host__ __device__ constexpr int flat_vec() {
  constexpr size_t w = max_size(sizeof(T)...);
  return w >= 16 ? 1 : (16 / w > 8 ? 8 : static_cast<int>(16 / w));
}

// Blocks for a flat kernel: a thread per flat_vec elements.
template <typename... T>
inline uint32_t flat_grid(const twinfer::ew::LaunchConfig& lc) {
  constexpr uint32_t v = flat_vec<T...>();
  return lc.blocks ? (lc.blocks + v - 1) / v : 0;
}

// y[i] = f(a[i]) over contiguous operands, the body of a flat kernel.
// Operands aligned for packs (and under 2^31 elements) go a Pack at a time
// with 32-bit indices, the last n % V elements one by one; others element by
// element. Launch with flat_grid<A, O>.
template <typename F, typename O, typename A>
__device__ __forceinline__ void flat_map(int64_t n, const A* __restrict__ a, O* __restrict__ y, const F& f) {
  constexpr int V = flat_vec<A, O>();
  if (V > 1 && n < INT32_MAX && reinterpret_cast<uintptr_t>(a) % sizeof(Pack<A, V>) == 0 &&
      reinterpret_cast<uintptr_t>(y) % sizeof(Pack<O, V>) == 0) {
    const uint32_t nv = static_cast<uint32_t>(n / V);
    const uint32_t first = blockIdx.x * blockDim.x + threadIdx.x, stride = gridDim.x * blockDim.x;
    for (uint32_t i = first; i < nv; i += stride) {
      const Pack<A, V> in = reinterpret_cast<const Pack<A, V>*>(a)[i];
      Pack<O, V> out;
#pragma unroll
      for (int k = 0; k < V; ++k) out.v[k] = f(in.v[k]);
      reinterpret_cast<Pack<O, V>*>(y)[i] = out;
    }
    for (uint32_t i = nv * V + first; i < static_cast<uint32_t>(n); i += stride) y[i] = f(a[i]);
    return;
  }
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] = f(a[i]);
}

template <typename F, typename O, typename A>
__global__ void unary_flat(int64_t n, const A* __restrict__ a, O* __restrict__ y, F f) {
  flat_map(n, a, y, f);
}

// y[i] = f(a[i], b[i]) when neither operand broadcasts (packs as unary_flat).
template <typename F, typename O, typename A, typename B>
__global__ void binary_flat(int64_t n, const A* __restrict__ a, const B* __restrict__ b, O* __restrict__ y, F f) {
  constexpr int V = flat_vec<A, B, O>();
  if (V > 1 && n < INT32_MAX && reinterpret_cast<uintptr_t>(a) % sizeof(Pack<A, V>) == 0 &&
      reinterpret_cast<uintptr_t>(b) % sizeof(Pack<B, V>) == 0 &&
      reinterpret_cast<uintptr_t>(y) % sizeof(Pack<O, V>) == 0) {
    const uint32_t nv = static_cast<uint32_t>(n / V);
    const uint32_t first = blockIdx.x * blockDim.x + threadIdx.x, stride = gridDim.x * blockDim.x;
    for (uint32_t i = first; i < nv; i += stride) {
      const Pack<A, V> pa = reinterpret_cast<const Pack<A, V>*>(a)[i];
      const Pack<B, V> pb = reinterpret_cast<const Pack<B, V>*>(b)[i];
      Pack<O, V> out;
#pragma unroll
      for (int k = 0; k < V; ++k) out.v[k] = f(pa.v[k], pb.v[k]);
      reinterpret_cast<Pack<O, V>*>(y)[i] = out;
    }
    for (uint32_t i = nv * V + first; i < static_cast<uint32_t>(n); i += stride) y[i] = f(a[i], b[i]);
    return;
  }
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
