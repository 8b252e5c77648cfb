#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/gemm_epilogue.h"
#include "backends/cuda/kernel_util.h"
#include "ops/elementwise/functors.h"
#include "ops/elementwise/typeset.h"
#include "ops/nn/activation_fn.h"

namespace twinfer::cuda {

namespace {

template <typename T>
struct LiftAct {
  nn::ActFn f;
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
template <typename U>
__global__ void expand_batches(const U* __restrict__ src, twinfer::nn::BatchBroadcast g, int64_t total,
                               int64_t matrix, U* __restrict__ dst) {
  for (int64_t j = first_index(); j < total; j += grid_stride()) {
    const int64_t b = j / matrix, i = j - b * matrix;
    dst[j] = src[twinfer::nn::source_batch(g, b) * matrix + i];
  }
}
// I: int32_t when rows * n is under 2^30 (the per-element modulo in 32
// bits; in 64 it is a long instruction sequence on the GPU), else int64_t.
template <typename I>
__global__ void bias_activation_f32(float* __restrict__ y, I rows, I n, const float* __restrict__ bias,
                                    twinfer::nn::ActFn f) {
  const I total = rows * n, stride = static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x);
  for (I i = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x); i < total;
       i += stride)
    y[i] = f(y[i] + bias[i % n]);
}
}  // namespace twinfer_gpu

namespace twinfer::cuda {

void apply_activation(void* y, int64_t n, DType dtype, const nn::Activation& act, cudaStream_t s) {
  if (act.none()) return;
  const ew::LaunchConfig lc = ew::elementwise_launch(n);
  if (!lc.blocks) return;
  const nn::ActFn f = nn::ActFn::of(act);
  ew::dispatch_typeset<ew::kF32 | ew::kF16 | ew::kBF16>(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    twinfer_gpu::unary_flat<<<twinfer_gpu::flat_grid<T>(lc), lc.threads, 0, s>>>(n, static_cast<const T*>(y), static_cast<T*>(y),
                                                             LiftAct<T>{f});
  });
  check_launch("activation kernel launch");
}

void add_bias_activation_f32(float* y, int64_t rows, int64_t n, const float* bias, const nn::Activation& act,
                             cudaStream_t s) {
  const ew::LaunchConfig lc = ew::elementwise_launch(rows * n);
  if (!lc.blocks) return;
  if (rows * n < (int64_t(1) << 30))
    twinfer_gpu::bias_activation_f32<int32_t><<<lc.blocks, lc.threads, 0, s>>>(
        y, static_cast<int32_t>(rows), static_cast<int32_t>(n), bias, nn::ActFn::of(act));
  else
    twinfer_gpu::bias_activation_f32<int64_t><<<lc.blocks, lc.threads, 0, s>>>(y, rows, n, bias, nn::ActFn::of(act));
  check_launch("bias + activation kernel launch");
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

void expand_batches(const void* src, const nn::BatchBroadcast& g, int64_t nb, int64_t matrix_elems, void* dst,
                    size_t elem_bytes, cudaStream_t s) {
  const int64_t total = nb * matrix_elems;
  const ew::LaunchConfig lc = ew::elementwise_launch(total);
  if (!lc.blocks) return;
  dispatch_width(elem_bytes, [&](auto tag) {
    using U = decltype(tag);
    twinfer_gpu::expand_batches<<<lc.blocks, lc.threads, 0, s>>>(static_cast<const U*>(src), g, total, matrix_elems,
                                                                 static_cast<U*>(dst));
  });
  check_launch("MatMul batch expansion launch");
}

}  // namespace twinfer::cuda
