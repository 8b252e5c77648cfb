// nn::Activation's arithmetic as a __host__ __device__ functor in float, for
// the CUDA epilogues (GEMM, convolution, the int8 layers). nn::Activation
// itself uses <cmath> and runs on the host only; tests/test_index_math.py
// checks this form against NumPy on the host (bindings' _test_activation).
#pragma once
#include "core/half.h"
#include "ops/elementwise/scalar.h"
#include "ops/nn/activation.h"

namespace twinfer::nn {

struct ActFn {
  ActKind kind = ActKind::kNone;
  float alpha = 0.f, beta = 0.f;

  static ActFn of(const Activation& a) { return ActFn{a.kind, a.alpha, a.beta}; }

  TWINFER_HD float operator()(float x) const {
    switch (kind) {
      case ActKind::kNone: return x;
      case ActKind::kRelu: return x > 0.f ? x : 0.f;
      case ActKind::kLeakyRelu: return x >= 0.f ? x : alpha * x;
      case ActKind::kClip: return fminf(fmaxf(x, alpha), beta);
      case ActKind::kSigmoid: return 1.f / (1.f + ew::m_exp(-x));
      case ActKind::kHardSigmoid: return fmaxf(0.f, fminf(1.f, alpha * x + beta));
      case ActKind::kHardSwish: return x * fmaxf(0.f, fminf(1.f, x / 6.f + 0.5f));
      case ActKind::kSilu: return x / (1.f + ew::m_exp(-x));
      case ActKind::kGelu: return 0.5f * x * (1.f + ew::m_erf(x * 0.70710678118654752440f));
      case ActKind::kGeluTanh:
        return 0.5f * x * (1.f + ew::m_tanh(0.79788456080286535588f * (x + 0.044715f * x * x * x)));
      case ActKind::kTanh: return ew::m_tanh(x);
    }
    return x;
  }
};

}  // namespace twinfer::nn
