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

// The same a Pack of V elements a thread (16-byte loads and stores), for
// tensors under 2^31 elements whose packs each hold one channel (NCHW:
// spatial % V == 0) or V consecutive ones (NHWC: channels % V == 0). The
// activations of MobileNetV2's ReLU6 and MobileNetV3's HardSwish
// convolutions run here after cuDNN's graph (conv.cc's act_after_).
template <typename T, int V>
__global__ void conv_bias_act_packs(uint32_t packs, twinfer::cuda::ConvChannelIndex channel_of, T* __restrict__ y,
                                    const T* __restrict__ bias, const T* __restrict__ residual,
                                    twinfer::nn::ActFn act) {
  const uint32_t stride = gridDim.x * blockDim.x;
  for (uint32_t p = blockIdx.x * blockDim.x + threadIdx.x; p < packs; p += stride) {
    const Pack<T, V> in = reinterpret_cast<const Pack<T, V>*>(y)[p];
    Pack<T, V> res{};
    if (residual) res = reinterpret_cast<const Pack<T, V>*>(residual)[p];
    const uint64_t c0 = bias ? channel_of(static_cast<uint64_t>(p) * V) : 0;
    Pack<T, V> out;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      float v = twinfer::ew::load(in.v[k]);
      if (bias) v += twinfer::ew::load(bias[channel_of.channels_last ? c0 + k : c0]);
      if (residual) v += twinfer::ew::load(res.v[k]);
      out.v[k] = twinfer::ew::store<T>(act(v));
    }
    reinterpret_cast<Pack<T, V>*>(y)[p] = out;
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
    constexpr int V = twinfer_gpu::flat_vec<T>();
    constexpr size_t pack = sizeof(twinfer_gpu::Pack<T, V>);
    const bool packs = total < INT32_MAX && total % V == 0 && reinterpret_cast<uintptr_t>(y) % pack == 0 &&
                       reinterpret_cast<uintptr_t>(residual) % pack == 0 &&
                       (!bias || (channels_last ? channels % V == 0 : spatial % V == 0));
    if (packs) {
      const ew::LaunchConfig lp = ew::elementwise_launch(total / V);
      twinfer_gpu::conv_bias_act_packs<T, V><<<lp.blocks, lp.threads, 0, s>>>(
          static_cast<uint32_t>(total / V), channel_of, static_cast<T*>(y), static_cast<const T*>(bias),
          static_cast<const T*>(residual), nn::ActFn::of(act));
      return;
    }
    twinfer_gpu::conv_bias_act<<<lc.blocks, lc.threads, 0, s>>>(total, channel_of, static_cast<T*>(y),
                                                                static_cast<const T*>(bias),
                                                                static_cast<const T*>(residual),
                                                                nn::ActFn::of(act));
  });
  check_launch("Conv epilogue launch");
}

}  // namespace twinfer::cuda
