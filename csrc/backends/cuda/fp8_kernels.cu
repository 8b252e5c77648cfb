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

}  // namespace twinfer_gpu

namespace twinfer::cuda {

void quantize_e4m3_rows(const void* x, DType xt, const float* x_scale, int64_t rows, int64_t k, int64_t kp,
                        uint8_t* out, cudaStream_t s) {
  const ew::LaunchConfig lc = ew::elementwise_launch(rows * kp);
  if (!lc.blocks) return;
  ew::dispatch_typeset<ew::kF32 | ew::kF16 | ew::kBF16>(xt, [&](auto tag) {
    using X = typename decltype(tag)::type;
    if (rows * kp < (int64_t(1) << 30) && rows * k < (int64_t(1) << 30))
      twinfer_gpu::quantize_e4m3_rows<X, int32_t><<<lc.blocks, lc.threads, 0, s>>>(
          static_cast<const X*>(x), x_scale, static_cast<int32_t>(rows), static_cast<int32_t>(k),
          static_cast<int32_t>(kp), out);
    else
      twinfer_gpu::quantize_e4m3_rows<X, int64_t><<<lc.blocks, lc.threads, 0, s>>>(static_cast<const X*>(x), x_scale,
                                                                                   rows, k, kp, out);
  });
  check_launch("E4M3 quantize launch");
}

}  // namespace twinfer::cuda
