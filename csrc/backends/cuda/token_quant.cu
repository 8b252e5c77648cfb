// Per-token int8 quantization kernels (token_quant_kernels.h): one block per
// row (a grid-stride loop over rows); the block reduces |x| to the row's
// largest by warp shuffles, then its threads write the quantized row.
// Every thread reaches every __syncthreads (no early return).
#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/kernel_util.h"
#include "backends/cuda/token_quant_kernels.h"
#include "ops/quant/token_quant.h"

namespace twinfer_gpu {

constexpr int kTokenThreads = 256;
constexpr int64_t kTokenMaxBlocks = 8192;

// x[i] (float16 / bfloat16 widened exactly, as the Cast before it did), or
// x[i] * smooth[i] (one float32 rounding, as the CPU's separate multiply;
// __fmul_rn so it can never be contracted into anything).
template <typename X>
__device__ __forceinline__ float token_value(const X* __restrict__ xr, const float* __restrict__ smooth, int64_t i) {
  const float v = twinfer::ew::load(xr[i]);
  return smooth ? __fmul_rn(v, smooth[i]) : v;
}

// The largest |x| of row xr (NaN ignored, as fmaxf and the CPU's loop do),
// the same value in every thread of the block.
template <typename X>
__device__ float token_row_amax(const X* __restrict__ xr, const float* __restrict__ smooth, int64_t k,
                               float* shared) {
  float m = 0.f;
  for (int64_t i = threadIdx.x; i < k; i += blockDim.x) m = fmaxf(m, fabsf(token_value(xr, smooth, i)));
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  __syncthreads();  // the previous row's readers of shared[0] are done
  if (lane == 0) shared[warp] = m;
  __syncthreads();
  if (warp == 0) {
    m = threadIdx.x < warps ? shared[threadIdx.x] : 0.f;
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (threadIdx.x == 0) shared[0] = m;
  }
  __syncthreads();
  return shared[0];
}

template <typename X>
__global__ void quantize_token_rows(const X* __restrict__ x, int64_t rows, int64_t k, int64_t kp,
                                    int8_t* __restrict__ q, float* __restrict__ scales,
                                    const float* __restrict__ smooth) {
  __shared__ float sf[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const X* xr = x + r * k;
    const float s = twinfer::quant::token_scale(token_row_amax(xr, smooth, k, sf));
    int8_t* qr = q + r * kp;
    for (int64_t i = threadIdx.x; i < kp; i += blockDim.x)
      qr[i] = i < k ? twinfer::quant::token_quantize(token_value(xr, smooth, i), s) : int8_t(0);
    if (threadIdx.x == 0) scales[r] = s;
  }
}

__global__ void token_qdq_rows(const float* __restrict__ x, int64_t rows, int64_t k, float* __restrict__ y) {
  __shared__ float sf[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * k;
    const float s = twinfer::quant::token_scale(token_row_amax(xr, nullptr, k, sf));
    for (int64_t i = threadIdx.x; i < k; i += blockDim.x)
      y[r * k + i] = static_cast<float>(twinfer::quant::token_quantize(xr[i], s)) * s;
  }
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {

namespace {
unsigned token_blocks(int64_t rows) {
  return static_cast<unsigned>(rows < twinfer_gpu::kTokenMaxBlocks ? rows : twinfer_gpu::kTokenMaxBlocks);
}
}  // namespace

void quantize_token_rows(const void* x, DType xt, int64_t rows, int64_t k, int64_t kp, int8_t* q, float* scales,
                         const float* smooth, cudaStream_t s) {
  if (rows <= 0) return;
  ew::dispatch_typeset<ew::kF32 | ew::kF16 | ew::kBF16>(xt, [&](auto tag) {
    using X = typename decltype(tag)::type;
    twinfer_gpu::quantize_token_rows<X><<<token_blocks(rows), twinfer_gpu::kTokenThreads, 0, s>>>(
        static_cast<const X*>(x), rows, k, kp, q, scales, smooth);
  });
  check_launch("per-token quantization launch");
}

void token_qdq_rows(const float* x, int64_t rows, int64_t k, float* y, cudaStream_t s) {
  if (rows <= 0 || k <= 0) return;
  twinfer_gpu::token_qdq_rows<<<token_blocks(rows), twinfer_gpu::kTokenThreads, 0, s>>>(x, rows, k, y);
  check_launch("TokenQDQ launch");
}

}  // namespace twinfer::cuda
