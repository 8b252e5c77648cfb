// Exp, Sqrt and Mish on float32 as loops the compiler vectorises (multiversioned,
// core/simd_clones.h), like logistic_fast.cc: the general kernel calls libm
// per element through the generic unary path, which a survey against
// onnxruntime (one thread, [8, 128, 3072]) measured 10.8x slower for Exp and
// 3.8x for Sqrt. Exp on fast_exp.h's exp_any (within 2 ulp of float64's over
// the whole range, subnormal results included); Sqrt is the instruction
// itself (correctly rounded). Mish, x * tanh(softplus(x)) (YOLOv4's
// activation; 3.5x onnxruntime's time through libm's log1p and tanh), as
// x * n / (n + 2) with n = e^x (e^x + 2): tanh(log(1 + e^x)) without a log,
// and x itself above 20, where n / (n + 2) is 1 in float. float64 and 16-bit
// types keep the general kernels (ops/elementwise/unary.cc).
#include <cmath>

#include "core/simd_clones.h"
#include "ops/elementwise/fast_exp.h"
#include "ops/elementwise/float32_loop.h"

namespace twinfer::ew {
namespace {

TWINFER_SIMD_CLONES void exp_loop(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = exp_any(x[i]);
}

// Built without errno (CMakeLists.txt: a negative x gives NaN, as the
// instruction does), so the loop is sqrtps and not a libm call per element.
TWINFER_SIMD_CLONES void sqrt_loop(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = __builtin_sqrtf(x[i]);
}

inline __attribute__((always_inline)) float mish_one(float x) {
  const float e = exp_any(x < 20.f ? x : 20.f);
  const float n = e * (e + 2.f);
  // Below -20 n / (n + 2) is e^x to float precision; taken as
  // (x e^(x + 24)) e^-24 so that e^x's subnormal range (x below -87) does not
  // cost the result its bits while the result itself is still normal.
  const float low = (x * exp_any(x + 24.f)) * 3.77513454e-11f;
  return x < -20.f ? low : (x < 20.f ? x * (n / (n + 2.f)) : x);  // NaN: x itself
}

TWINFER_SIMD_CLONES void mish_loop(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = mish_one(x[i]);
}

}  // namespace

TWINFER_REGISTER_KERNEL("Mish", Backend::kCPU, 10, float32_input, make_kernel<Float32LoopKernel<mish_loop>>);
TWINFER_REGISTER_KERNEL("Exp", Backend::kCPU, 10, float32_input, make_kernel<Float32LoopKernel<exp_loop>>);
TWINFER_REGISTER_KERNEL("Sqrt", Backend::kCPU, 10, float32_input, make_kernel<Float32LoopKernel<sqrt_loop>>);

}  // namespace twinfer::ew
