// Sigmoid, Tanh, SiLU (Swish, alpha 1) and GELU's tanh form (approximate="tanh") on float32 in
// loops the compiler vectorises (multiversioned for AVX-512/AVX2,
// core/simd_clones.h), on the exp of ops/elementwise/fast_exp.h. The
// general kernel calls libm per element: a survey against onnxruntime
// measured Tanh 59x, Sigmoid 8x and the tanh GELU 44x slower on their own,
// GPT-2's prefill 1.5x slower overall (its GELUs took 76 of 183 ms).
//
//   sigmoid(x) = 1 / (1 + e) for x >= 0, e / (1 + e) below, e = exp(-|x|)
//   tanh(x)    = sign(x) * -m / (2 + m), m = expm1(-2|x|) (no cancellation
//                near 0, where 1 - e would lose the low bits)
//   gelu(x)    = x * sigmoid(2 z), z = sqrt(2/pi) (x + 0.044715 x^3): the
//                same as 0.5 x (1 + tanh z) without its cancellation for z < 0
// Every branch computed and selected, as in erf_fast.cc. Against the float64
// functions on a dense grid and the edges: tests/test_ops_elementwise.py.
// float64 and float16 keep the general kernels (ops/elementwise/unary.cc).
#include <cmath>
#include <cstdint>

#include "ops/elementwise/logistic_fast.h"

#include "core/simd_clones.h"
#include "ops/elementwise/fast_exp.h"
#include "ops/elementwise/float32_loop.h"

namespace twinfer::ew {
namespace {

inline __attribute__((always_inline)) float sigmoid_one(float x) {
  const float e = exp_negative(-std::fabs(x));
  const float s = (x >= 0.f ? 1.f : e) / (1.f + e);
  return x != x ? x : s;
}

inline __attribute__((always_inline)) float tanh_one(float x) {
  const float m = expm1_negative(-2.f * std::fabs(x));
  return x != x ? x : std::copysign(-m / (2.f + m), x);
}

TWINFER_SIMD_CLONES void gelu_tanh_loop(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float z = 0.79788456080286535588f * (v + 0.044715f * v * v * v);
    // Very negative v: -0 (sigmoid 0), and -inf * 0 = NaN, as onnxruntime and PyTorch give.
    y[i] = v * sigmoid_one(2.f * z);
  }
}

// Swish with alpha 1 (SiLU, fused from x * sigmoid(x) by graph/passes/fuse.cc).
TWINFER_SIMD_CLONES void silu_loop(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * sigmoid_one(x[i]);
}

bool silu_supports(const KernelBuildInfo& info, std::string* why) {
  if (info.node().attr_float("alpha", 1.f) != 1.f) {
    if (why) *why = "fast path: alpha = 1 only";
    return false;
  }
  return float32_input(info, why);
}

bool gelu_tanh_supports(const KernelBuildInfo& info, std::string* why) { return float32_gelu(info, "tanh", why); }

}  // namespace

// Outside the anonymous namespace: the RNN cells' gates use them too
// (backends/cpu/onednn_rnn.cc).
TWINFER_SIMD_CLONES void sigmoid_loop(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = sigmoid_one(x[i]);
}

TWINFER_SIMD_CLONES void tanh_loop(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = tanh_one(x[i]);
}

TWINFER_REGISTER_KERNEL("Sigmoid", Backend::kCPU, 10, float32_input, make_kernel<Float32LoopKernel<sigmoid_loop>>);
TWINFER_REGISTER_KERNEL("Tanh", Backend::kCPU, 10, float32_input, make_kernel<Float32LoopKernel<tanh_loop>>);
TWINFER_REGISTER_KERNEL("Swish", Backend::kCPU, 10, silu_supports, make_kernel<Float32LoopKernel<silu_loop>>);
TWINFER_REGISTER_KERNEL("Gelu", Backend::kCPU, 10, gelu_tanh_supports,
                        make_kernel<Float32LoopKernel<gelu_tanh_loop>>);

}  // namespace twinfer::ew
