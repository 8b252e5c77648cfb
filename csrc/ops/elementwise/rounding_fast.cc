// Floor, Ceil and Round (half to even) on float32 as loops the compiler
// vectorises: the AVX2 / AVX-512 clones (core/simd_clones.h) inline them as
// one rounding instruction, where the general kernel's baseline build (no
// SSE4.1) calls libm per element: 2.6-6.3x onnxruntime's time on
// [8, 128, 3072] in stop 43's survey (docs/performance.md). Exact: the same
// values as floorf / ceilf / roundevenf, NaN and infinities included.
#include "core/simd_clones.h"
#include "ops/elementwise/float32_loop.h"

namespace twinfer::ew {
namespace {

TWINFER_SIMD_CLONES void floor_loop(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = __builtin_floorf(x[i]);
}

TWINFER_SIMD_CLONES void ceil_loop(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = __builtin_ceilf(x[i]);
}

TWINFER_SIMD_CLONES void round_loop(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = __builtin_roundevenf(x[i]);
}

}  // namespace

TWINFER_REGISTER_KERNEL("Floor", Backend::kCPU, 10, float32_input, make_kernel<Float32LoopKernel<floor_loop>>);
TWINFER_REGISTER_KERNEL("Ceil", Backend::kCPU, 10, float32_input, make_kernel<Float32LoopKernel<ceil_loop>>);
TWINFER_REGISTER_KERNEL("Round", Backend::kCPU, 10, float32_input, make_kernel<Float32LoopKernel<round_loop>>);

}  // namespace twinfer::ew
