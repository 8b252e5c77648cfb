#include "backends/cuda/conv_epilogue.h"
#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/kernel_util.h"
#include "ops/elementwise/scalar.h"

namespace twinfer_gpu {

template <typename T>
__global__ void conv_bias_act(int64_t total, twinfer::ew::FastDivmod spatial, twinfer::ew::FastDivmod channels,
                              T* __restrict__ y, const T* __restrict__ bias, const T* __restrict__ residual, int kind,
                              float alpha, float beta) {
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    uint64_t rest, s, n, c;
    spatial.divmod(static_cast<uint64_t>(i), rest, s);
    channels.divmod(rest, n, c);
    float v = twinfer::ew::load(y[i]);
    if (bias) v += twinfer::ew::load(bias[c]);
    if (residual) v += twinfer::ew::load(residual[i]);
    switch (kind) {  // nn::ActKind, as gemm_epilogue.cu
      case 1: v = v > 0.f ? v : 0.f; break;
      case 2: v = v >= 0.f ? v : alpha * v; break;
      case 3: v = fminf(fmaxf(v, alpha), beta); break;
      case 4: v = 1.f / (1.f + expf(-v)); break;
      case 5: v = fmaxf(0.f, fminf(1.f, alpha * v + beta)); break;
      case 6: v = v * fmaxf(0.f, fminf(1.f, v / 6.f + 0.5f)); break;
      case 7: v = v / (1.f + expf(-v)); break;
      case 8: v = 0.5f * v * (1.f + erff(v * 0.70710678118654752440f)); break;
      case 9: v = 0.5f * v * (1.f + tanhf(0.79788456080286535588f * (v + 0.044715f * v * v * v))); break;
      case 10: v = tanhf(v); break;
      default: break;
    }
    y[i] = twinfer::ew::store<T>(v);
  }
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {

void conv_epilogue(void* y, const void* bias, const void* residual, int64_t n, int64_t channels, int64_t spatial,
                   DType dtype, const nn::Activation& act, cudaStream_t s) {
  if (!bias && !residual && act.none()) return;
  const int64_t total = n * channels * spatial;
  const ew::LaunchConfig lc = ew::elementwise_launch(total);
  if (!lc.blocks) return;
  static_assert(static_cast<int>(nn::ActKind::kRelu) == 1 && static_cast<int>(nn::ActKind::kTanh) == 10,
                "the kernel's activation codes follow nn::ActKind");
  const ew::FastDivmod sp(static_cast<uint64_t>(spatial > 0 ? spatial : 1));
  const ew::FastDivmod ch(static_cast<uint64_t>(channels > 0 ? channels : 1));
  ew::dispatch_typeset<ew::kF32 | ew::kF16 | ew::kBF16>(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    twinfer_gpu::conv_bias_act<<<lc.blocks, lc.threads, 0, s>>>(total, sp, ch, static_cast<T*>(y),
                                                                static_cast<const T*>(bias),
                                                                static_cast<const T*>(residual),
                                                                static_cast<int>(act.kind), act.alpha, act.beta);
  });
  check_launch("Conv epilogue launch");
}

}  // namespace twinfer::cuda
