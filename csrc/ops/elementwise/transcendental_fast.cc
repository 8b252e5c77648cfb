// Exp, Log, Sqrt, Softplus, Mish, Elu, Selu and Celu on float32 as loops the compiler
// vectorises (multiversioned, core/simd_clones.h), like logistic_fast.cc. The
// general kernel calls libm per element through the generic unary path, which
// a survey against onnxruntime (one thread, [8, 128, 3072]) measured 10.8x
// slower for Exp, 5x for Elu, 3.8x for Sqrt, 3.5x for Mish and Selu, 1.44x
// for Log and 1.27x for Softplus.
//   Exp       fast_exp.h's exp_any (within 4 ulp over the whole range,
//             subnormal results included)
//   Log       fast_log.h's log_any
//   Sqrt      the instruction (correctly rounded; built without errno)
//   Softplus  max(x, 0) + log1p(e^-|x|)
//   Mish      x * tanh(softplus(x)) as x * n / (n + 2), n = e^x (e^x + 2)
//             (after exp, in double): tanh(log(1 + e^x)) without a log; x
//             itself above 20
//   Elu, Selu, Celu  fast_exp.h's expm1_negative for the negative side
//             (Celu: alpha > 0, x / alpha as the definition divides)
// float64 and 16-bit types keep the general kernels (ops/elementwise/unary.cc).
#include <cmath>

#include "core/simd_clones.h"
#include "ops/elementwise/fast_exp.h"
#include "ops/elementwise/fast_log.h"
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
  // n / (n + 2) in double: in float its four roundings on top of exp's
  // (0.94 ulp) reached 4.3 ulp near x = -6.8; in double the result is
  // within about 1.5 ulp.
  const double ed = e, n = ed * (ed + 2.0);
  const float mid = static_cast<float>(static_cast<double>(x) * (n / (n + 2.0)));
  // Below -20 n / (n + 2) is e^x to float precision; taken as
  // (x e^(x + 24)) e^-24 so that e^x's subnormal range (x below -87) does not
  // cost the result its bits while the result itself is still normal.
  const float low = (x * exp_any(x + 24.f)) * 3.77513454e-11f;
  return x < -20.f ? low : (x < 20.f ? mid : x);  // NaN: x itself
}

TWINFER_SIMD_CLONES void mish_loop(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = mish_one(x[i]);
}

TWINFER_SIMD_CLONES void log_loop(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = log_any(x[i]);
}

// softplus(x) = log(1 + e^x) = max(x, 0) + log1p(e^-|x|): no overflow, and
// a very negative x keeps its tiny result's bits.
TWINFER_SIMD_CLONES void softplus_loop(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i], a = v < 0.f ? -v : v;
    const float r = (v > 0.f ? v : 0.f) + log1p_unit(exp_any(-a));
    y[i] = v != v ? v : r;
  }
}

// Elu: x < 0 ? alpha (e^x - 1) : x. Selu: gamma * (x > 0 ? x : alpha (e^x - 1))
// (ONNX's alpha e^x - alpha, without its cancellation near 0).
TWINFER_SIMD_CLONES void elu_loop(const float* __restrict x, float* __restrict y, int64_t n, float alpha,
                                  float gamma) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = gamma * (v < 0.f ? alpha * expm1_negative(v) : v);  // NaN: v < 0 is false, v itself
  }
}

TWINFER_SIMD_CLONES void selu_loop(const float* __restrict x, float* __restrict y, int64_t n, float alpha,
                                   float gamma) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = gamma * (v <= 0.f ? alpha * expm1_negative(v) : v);
  }
}

// Celu with alpha > 0: x < 0 ? alpha (e^(x / alpha) - 1) : x, -0 as +0 and
// NaN as NaN, as the general kernel's max(0, x) + min(0, ...) gives them.
TWINFER_SIMD_CLONES void celu_loop(const float* __restrict x, float* __restrict y, int64_t n, float alpha, float) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = v < 0.f ? alpha * expm1_negative(v / alpha) : v + 0.f;
  }
}

bool celu_fast(const KernelBuildInfo& info, std::string* why) {
  if (!float32_input(info, why)) return false;
  if (info.node().attr_float("alpha", 1.f) > 0.f) return true;
  if (why) *why = "fast path: alpha > 0 only";
  return false;
}

// Elu, Selu and Celu's attributes as (alpha, gamma); gamma is 1 but for Selu.
struct AlphaOneAttrs {
  static FloatPair read(const graph::Node& n) { return {n.attr_float("alpha", 1.f), 1.f}; }
};

struct SeluAttrs {
  static FloatPair read(const graph::Node& n) {
    return {n.attr_float("alpha", 1.67326319217681884765625f), n.attr_float("gamma", 1.05070102214813232421875f)};
  }
};

}  // namespace

TWINFER_REGISTER_KERNEL("Elu", Backend::kCPU, 10, float32_input, make_kernel<Float32AttrLoopKernel<elu_loop, AlphaOneAttrs>>);
TWINFER_REGISTER_KERNEL("Selu", Backend::kCPU, 10, float32_input, make_kernel<Float32AttrLoopKernel<selu_loop, SeluAttrs>>);
TWINFER_REGISTER_KERNEL("Celu", Backend::kCPU, 10, celu_fast, make_kernel<Float32AttrLoopKernel<celu_loop, AlphaOneAttrs>>);
TWINFER_REGISTER_KERNEL("Log", Backend::kCPU, 10, float32_input, make_kernel<Float32LoopKernel<log_loop>>);
TWINFER_REGISTER_KERNEL("Softplus", Backend::kCPU, 10, float32_input, make_kernel<Float32LoopKernel<softplus_loop>>);
TWINFER_REGISTER_KERNEL("Mish", Backend::kCPU, 10, float32_input, make_kernel<Float32LoopKernel<mish_loop>>);
TWINFER_REGISTER_KERNEL("Exp", Backend::kCPU, 10, float32_input, make_kernel<Float32LoopKernel<exp_loop>>);
TWINFER_REGISTER_KERNEL("Sqrt", Backend::kCPU, 10, float32_input, make_kernel<Float32LoopKernel<sqrt_loop>>);

}  // namespace twinfer::ew
