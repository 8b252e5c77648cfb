#include "backends/cuda/depthwise_conv.h"
#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/kernel_util.h"
#include "ops/elementwise/scalar.h"
#include "ops/nn/activation_fn.h"

namespace twinfer_gpu {

// V elements at an element offset of `base`, widened to float: one 16-byte
// load when V > 1 (the launch checked the alignment).
template <typename T, int V>
struct PackRead {
  const T* base;
  __device__ __forceinline__ void operator()(int64_t offset, float* v) const {
    if constexpr (V == 1) {
      v[0] = twinfer::ew::load(base[offset]);
    } else {
      const Pack<T, V> p = *reinterpret_cast<const Pack<T, V>*>(base + offset);
#pragma unroll
      for (int k = 0; k < V; ++k) v[k] = twinfer::ew::load(p.v[k]);
    }
  }
};

// A thread per V channels of one output position (depthwise_math.h), the
// fused Conv's epilogue applied to the float sums.
template <typename T, int V>
__global__ void depthwise_nhwc(uint64_t packs, twinfer::cuda::DepthwiseGeometry g, const T* __restrict__ x,
                               const T* __restrict__ w, const T* __restrict__ bias, const T* __restrict__ residual,
                               T* __restrict__ y, twinfer::nn::ActFn act) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t p = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < packs; p += stride) {
    int64_t n, oh, ow, c0;
    const int64_t at = g.position(p, V, &n, &oh, &ow, &c0);
    float acc[V], extra[V];
#pragma unroll
    for (int k = 0; k < V; ++k) acc[k] = 0.f;
    g.accumulate<V>(n, oh, ow, c0, PackRead<T, V>{x}, PackRead<T, V>{w}, acc);
    if (bias) {
      PackRead<T, V>{bias}(c0, extra);
#pragma unroll
      for (int k = 0; k < V; ++k) acc[k] += extra[k];
    }
    if (residual) {
      PackRead<T, V>{residual}(at, extra);
#pragma unroll
      for (int k = 0; k < V; ++k) acc[k] += extra[k];
    }
    Pack<T, V> out;
#pragma unroll
    for (int k = 0; k < V; ++k) out.v[k] = twinfer::ew::store<T>(act(acc[k]));
    *reinterpret_cast<Pack<T, V>*>(y + at) = out;
  }
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {

void depthwise_conv_nhwc(const DepthwiseGeometry& g, int64_t batch, const void* x, const void* w, const void* bias,
                         const void* residual, void* y, DType dtype, const nn::Activation& act, cudaStream_t s) {
  ew::dispatch_typeset<ew::kF32 | ew::kF16 | ew::kBF16>(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int V = 16 / sizeof(T);
    auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    const bool packs = g.channels % V == 0 && aligned(x) && aligned(w) && aligned(y) && aligned(bias) &&
                       aligned(residual);
    auto launch = [&](auto width) {
      constexpr int P = decltype(width)::value;
      const DepthwiseGeometry gp(g.channels, g.in_h, g.in_w, g.out_h, g.out_w, g.k_h, g.k_w, g.stride_h, g.stride_w,
                                 g.pad_h, g.pad_w, g.dil_h, g.dil_w, P);
      const int64_t total = gp.packs(batch, P);
      const ew::LaunchConfig lc = ew::elementwise_launch(total);
      if (!lc.blocks) return;
      twinfer_gpu::depthwise_nhwc<T, P><<<lc.blocks, lc.threads, 0, s>>>(
          static_cast<uint64_t>(total), gp, static_cast<const T*>(x), static_cast<const T*>(w),
          static_cast<const T*>(bias), static_cast<const T*>(residual), static_cast<T*>(y), nn::ActFn::of(act));
    };
    if (packs) launch(std::integral_constant<int, V>{});
    else launch(std::integral_constant<int, 1>{});
  });
  check_launch("depthwise convolution launch");
}

}  // namespace twinfer::cuda
