#include "backends/cuda/channels_last_index.h"
#include "backends/cuda/conv_epilogue.h"
#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/kernel_util.h"
#include "ops/elementwise/scalar.h"
#include "ops/nn/activation_fn.h"

namespace twinfer_gpu {

template <typename T>
__global__ void conv_bias_act(int64_t total, twinfer::cuda::ConvChannelIndex channel_of, T* __restrict__ y,
                              const T* __restrict__ bias, const T* __restrict__ residual, twinfer::nn::ActFn act) {
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    float v = twinfer::ew::load(y[i]);
    if (bias) v += twinfer::ew::load(bias[channel_of(static_cast<uint64_t>(i))]);
    if (residual) v += twinfer::ew::load(residual[i]);
    y[i] = twinfer::ew::store<T>(act(v));
  }
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {

void conv_epilogue(void* y, const void* bias, const void* residual, int64_t n, int64_t channels, int64_t spatial,
                   DType dtype, const nn::Activation& act, cudaStream_t s, bool channels_last) {
  if (!bias && !residual && act.none()) return;
  const int64_t total = n * channels * spatial;
  const ew::LaunchConfig lc = ew::elementwise_launch(total);
  if (!lc.blocks) return;
  const ConvChannelIndex channel_of(channels, spatial, channels_last);
  ew::dispatch_typeset<ew::kF32 | ew::kF16 | ew::kBF16>(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    twinfer_gpu::conv_bias_act<<<lc.blocks, lc.threads, 0, s>>>(total, channel_of, static_cast<T*>(y),
                                                                static_cast<const T*>(bias),
                                                                static_cast<const T*>(residual),
                                                                nn::ActFn::of(act));
  });
  check_launch("Conv epilogue launch");
}

}  // namespace twinfer::cuda
