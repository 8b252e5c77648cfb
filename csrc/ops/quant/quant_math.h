// The integer arithmetic of twinfer's fused int8 ops, written once for the
// CPU kernels and the CUDA kernels (TWINFER_HD): QBinary's element and the
// epilogue of QMatMul / QConv on an int32 accumulator. The host runs exactly
// this code in tests/test_index_math.py against NumPy (bindings'
// _test_qbinary / _test_qlinear_epilogue).
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>

#include "core/half.h"
#include "ops/nn/activation_fn.h"

// Always inlined on the host too: the CPU kernels' loops over these must
// vectorise (core/simd_clones.h builds them per instruction set).
#if defined(__CUDACC__)
#define TWINFER_QHD __host__ __device__ __forceinline__
#else
#define TWINFER_QHD inline __attribute__((always_inline))
#endif

namespace twinfer::quant {

// min(max(v, lo), hi); std::min/max on the host so the loops around it
// vectorise, fminf/fmaxf on the device.
TWINFER_QHD float clamp_f(float v, float lo, float hi) {
#ifdef __CUDA_ARCH__
  return fminf(fmaxf(v, lo), hi);
#else
  return std::min(std::max(v, lo), hi);
#endif
}

// Round half to even of |v| < 2^22 without the FP environment: adding and
// subtracting 1.5 * 2^23 leaves the nearest integer (ties to even), as
// QuantizeLinear rounds. Exact in float32 for the clamped int8 range.
TWINFER_QHD float round_half_even_f(float v) {
  constexpr float kMagic = 12582912.f;
  return (v + kMagic) - kMagic;
}

// r / y_scale rounded and saturated into [lo, hi] (the integer range less
// the zero point), NaN to 0, plus the zero point: QuantizeLinear's value.
TWINFER_QHD int32_t requantize(float r, float y_scale, float lo, float hi, int32_t y_zero) {
  float v = r / y_scale;
  v = v == v ? v : 0.f;
  return static_cast<int32_t>(round_half_even_f(clamp_f(v, lo, hi))) + y_zero;
}

// ---- QBinary (ops/quant/qbinary.h) -------------------------------------------

struct QOperand {
  float scale = 1.f;
  int32_t zero = 0;
};

struct QBinaryParams {
  QOperand a, b;
  float y_scale = 1.f, lo = 0.f, hi = 0.f;                // lo/hi: y's integer range less its zero point
  float floor = -std::numeric_limits<float>::infinity();  // 0 with a fused Relu
  float offset = 0.f;                                     // added to r before requantizing (qbinary.h)
  int32_t y_zero = 0;
};

// One element, in the QDQ graph's float32 order.
template <typename QY, bool kMul, typename QA, typename QB>
TWINFER_QHD QY qbinary_one(QA qa, QB qb, const QBinaryParams& p) {
#if defined(__CUDA_ARCH__)
  // nvcc contracts a * s + b into one fma, which rounds once where the CPU
  // (built with -ffp-contract=off) rounds twice: on a sum that lands on .5 of
  // an output step, the last bit decides the int8. Round as the CPU does.
  const float fa = __fmul_rn(static_cast<float>(static_cast<int32_t>(qa) - p.a.zero), p.a.scale);
  const float fb = __fmul_rn(static_cast<float>(static_cast<int32_t>(qb) - p.b.zero), p.b.scale);
  float r = kMul ? __fmul_rn(fa, fb) : __fadd_rn(fa, fb);
  r = r < p.floor ? p.floor : r;  // Relu: max(r, 0); NaN passes as in the graph
  r = __fadd_rn(r, p.offset);
#else
  const float fa = static_cast<float>(static_cast<int32_t>(qa) - p.a.zero) * p.a.scale;
  const float fb = static_cast<float>(static_cast<int32_t>(qb) - p.b.zero) * p.b.scale;
  float r = kMul ? fa * fb : fa + fb;
  r = r < p.floor ? p.floor : r;  // Relu: max(r, 0); NaN passes as in the graph
  r = r + p.offset;               // 0 unless fused (exact then: r + 0 is r, a -0 rounds to 0 either way)
#endif
  return static_cast<QY>(requantize(r, p.y_scale, p.lo, p.hi, p.y_zero));
}

// ---- QMatMul / QConv epilogue (ops/quant/qlinear_fused.h) ---------------------

// From the int32 sum over k of x_q[k] * w[k, n] (x taken as stored, or
// shifted to int8 with x_zero shifted alike) to the op's output for output
// channel n:
//   y = act((acc - x_zero * colsum[n]) * scale[n] + bias[n])
// with scale[n] = x_scale * w_scale[n] and colsum[n] = sum over k of w[k, n];
// then, with a quantized output, requantize(y). With x quantized per token
// (token_quant.h) scale[n] is w_scale[n] and row r's own scale multiplies
// after it: (acc * scale[n]) * row_scale[r] + bias[n], the order the CPU's
// oneDNN post-ops use. Pointers are device pointers in a kernel and host
// pointers in the host test.
struct LinearEpilogue {
  const float* scale = nullptr;     // [N]
  const float* bias = nullptr;      // [N] or null
  const int32_t* colsum = nullptr;  // [N]; read only when x_zero != 0
  const float* row_scale = nullptr; // [rows] or null: x quantized per token
  int32_t x_zero = 0;
  nn::ActFn act;
  bool quantized = false;
  float y_scale = 1.f, lo = 0.f, hi = 0.f;
  int32_t y_zero = 0;

  TWINFER_HD float value(int32_t acc, int64_t n, int64_t r = 0) const {
    const int32_t centred = x_zero != 0 ? acc - x_zero * colsum[n] : acc;
    float v = static_cast<float>(centred) * scale[n];
    if (row_scale) v *= row_scale[r];
    if (bias) v += bias[n];
    return act(v);
  }
  TWINFER_HD int32_t quantize(float v) const { return requantize(v, y_scale, lo, hi, y_zero); }
};

}  // namespace twinfer::quant
