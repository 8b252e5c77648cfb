#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/gemm_epilogue.h"
#include "backends/cuda/kernel_util.h"
#include "ops/elementwise/functors.h"
#include "ops/elementwise/typeset.h"

namespace twinfer::cuda {

namespace {

// nn::Activation's arithmetic in __host__ __device__ form (nn::Activation
// itself uses <cmath>, host only), computed in float like the CPU kernels.
struct ActFn {
  nn::ActKind kind;
  float alpha, beta;
  TWINFER_HD float operator()(float x) const {
    switch (kind) {
      case nn::ActKind::kNone: return x;
      case nn::ActKind::kRelu: return x > 0.f ? x : 0.f;
      case nn::ActKind::kLeakyRelu: return x >= 0.f ? x : alpha * x;
      case nn::ActKind::kClip: return fminf(fmaxf(x, alpha), beta);
      case nn::ActKind::kSigmoid: return 1.f / (1.f + ew::m_exp(-x));
      case nn::ActKind::kHardSigmoid: return fmaxf(0.f, fminf(1.f, alpha * x + beta));
      case nn::ActKind::kHardSwish: return x * fmaxf(0.f, fminf(1.f, x / 6.f + 0.5f));
      case nn::ActKind::kSilu: return x / (1.f + ew::m_exp(-x));
      case nn::ActKind::kGelu: return 0.5f * x * (1.f + ew::m_erf(x * 0.70710678118654752440f));
      case nn::ActKind::kGeluTanh:
        return 0.5f * x * (1.f + ew::m_tanh(0.79788456080286535588f * (x + 0.044715f * x * x * x)));
      case nn::ActKind::kTanh: return ew::m_tanh(x);
    }
    return x;
  }
};

template <typename T>
struct LiftAct {
  ActFn f;
  TWINFER_HD T operator()(T v) const { return ew::store<T>(f(static_cast<float>(ew::load(v)))); }
};

}  // namespace

}  // namespace twinfer::cuda

// Kernels stay in twinfer_gpu's namespace for the sanitizer's filter.
namespace twinfer_gpu {
template <typename U>
__global__ void gemm_broadcast_c(const U* __restrict__ c, int64_t rows, int64_t cols, U* __restrict__ y, int64_t M,
                                 int64_t N) {
  const int64_t total = M * N;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const int64_t r = i / N, k = i - r * N;
    y[i] = c[(rows == 1 ? 0 : r) * cols + (cols == 1 ? 0 : k)];
  }
}
}  // namespace twinfer_gpu

namespace twinfer::cuda {

void apply_activation(void* y, int64_t n, DType dtype, const nn::Activation& act, cudaStream_t s) {
  if (act.none()) return;
  const ew::LaunchConfig lc = ew::elementwise_launch(n);
  if (!lc.blocks) return;
  const ActFn f{act.kind, act.alpha, act.beta};
  ew::dispatch_typeset<ew::kF32 | ew::kF16 | ew::kBF16>(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    twinfer_gpu::unary_flat<<<lc.blocks, lc.threads, 0, s>>>(n, static_cast<const T*>(y), static_cast<T*>(y),
                                                             LiftAct<T>{f});
  });
  check_launch("activation kernel launch");
}

void broadcast_2d(const void* c, int64_t rows, int64_t cols, void* y, int64_t M, int64_t N, size_t elem_bytes,
                  cudaStream_t s) {
  const ew::LaunchConfig lc = ew::elementwise_launch(M * N);
  if (!lc.blocks) return;
  auto go = [&](auto tag) {
    using U = decltype(tag);
    twinfer_gpu::gemm_broadcast_c<<<lc.blocks, lc.threads, 0, s>>>(static_cast<const U*>(c), rows, cols,
                                                                   static_cast<U*>(y), M, N);
  };
  switch (elem_bytes) {
    case 2: go(uint16_t{}); break;
    case 4: go(uint32_t{}); break;
    case 8: go(uint64_t{}); break;
    default: throw Error(ErrorKind::kDType, "Gemm: C of an unsupported element size");
  }
  check_launch("Gemm C broadcast launch");
}

}  // namespace twinfer::cuda
