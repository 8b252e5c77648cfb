#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/fp8_kernels.h"
#include "backends/cuda/kernel_util.h"
#include "ops/quant/fp8_matmul.h"

namespace twinfer_gpu {

// I: int32_t when rows * kp is under 2^30 (64-bit division per element is a
// long instruction sequence on the GPU), else int64_t.
template <typename X, typename I>
__global__ void quantize_e4m3_rows(const X* __restrict__ x, const float* __restrict__ x_scale, I rows, I k, I kp,
                                   uint8_t* __restrict__ out) {
  const float s = *x_scale;
  const I total = rows * kp;
  const I stride = static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x);
  for (I i = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x); i < total;
       i += stride) {
    const I r = i / kp, c = i - r * kp;
    out[i] = c < k ? twinfer::quant::fp8_quantize(static_cast<float>(twinfer::ew::load(x[r * k + c])), s) : uint8_t(0);
  }
}

// The common case, x's rows unpadded (K a multiple of 16, so kp == K): x as
// one flat array, eight elements a thread, read in 16-byte loads (one for
// 16-bit x, two for float32) and written as one 8-byte store, where the
// scalar kernel above makes a byte store and a division per element (an
// FP8 BERT's FFN input is 25M elements a layer).
template <typename X>
__global__ void quantize_e4m3_flat8(const X* __restrict__ x, const float* __restrict__ x_scale, int32_t groups,
                                    uint2* __restrict__ out) {
  const float s = *x_scale;
  const int32_t stride = static_cast<int32_t>(gridDim.x) * static_cast<int32_t>(blockDim.x);
  for (int32_t g = static_cast<int32_t>(blockIdx.x) * static_cast<int32_t>(blockDim.x) + static_cast<int32_t>(threadIdx.x);
       g < groups; g += stride) {
    alignas(16) X v[8];
    const uint4* src = reinterpret_cast<const uint4*>(x + static_cast<int64_t>(g) * 8);
#pragma unroll
    for (int h = 0; h < static_cast<int>(sizeof(X) * 8 / 16); ++h) reinterpret_cast<uint4*>(v)[h] = src[h];
    uint32_t lo = 0, hi = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      lo |= static_cast<uint32_t>(twinfer::quant::fp8_quantize(static_cast<float>(twinfer::ew::load(v[j])), s)) << (8 * j);
      hi |= static_cast<uint32_t>(twinfer::quant::fp8_quantize(static_cast<float>(twinfer::ew::load(v[j + 4])), s))
            << (8 * j);
    }
    out[g] = make_uint2(lo, hi);
  }
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {

void quantize_e4m3_rows(const void* x, DType xt, const float* x_scale, int64_t rows, int64_t k, int64_t kp,
                        uint8_t* out, cudaStream_t s) {
  const ew::LaunchConfig lc = ew::elementwise_launch(rows * kp);
  if (!lc.blocks) return;
  const int64_t total = rows * kp;
  const bool flat8 = k == kp && total % 8 == 0 && total / 8 < (int64_t(1) << 30) &&
                     reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 8 == 0;
  ew::dispatch_typeset<ew::kF32 | ew::kF16 | ew::kBF16>(xt, [&](auto tag) {
    using X = typename decltype(tag)::type;
    if (flat8) {
      const ew::LaunchConfig lc8 = ew::elementwise_launch(total / 8);
      twinfer_gpu::quantize_e4m3_flat8<X><<<lc8.blocks, lc8.threads, 0, s>>>(
          static_cast<const X*>(x), x_scale, static_cast<int32_t>(total / 8), reinterpret_cast<uint2*>(out));
    } else if (rows * kp < (int64_t(1) << 30) && rows * k < (int64_t(1) << 30)) {
      twinfer_gpu::quantize_e4m3_rows<X, int32_t><<<lc.blocks, lc.threads, 0, s>>>(
          static_cast<const X*>(x), x_scale, static_cast<int32_t>(rows), static_cast<int32_t>(k),
          static_cast<int32_t>(kp), out);
    } else {
      twinfer_gpu::quantize_e4m3_rows<X, int64_t><<<lc.blocks, lc.threads, 0, s>>>(static_cast<const X*>(x), x_scale,
                                                                                   rows, k, kp, out);
    }
  });
  check_launch("E4M3 quantize launch");
}

}  // namespace twinfer::cuda
