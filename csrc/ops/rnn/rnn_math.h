// Per-element math of RNN, GRU and LSTM, shared by the CPU kernel (rnn.cc)
// and the CUDA kernel (backends/cuda/recurrent.cu): the cell kinds, the
// eleven activation functions with their alpha / beta, clip, and the one
// product helper. No framework headers, so nvcc compiles it as it is.
//
// Products go through rnn_mul: on the device an explicitly rounded multiply
// (__fmul_rn / __dmul_rn), so nvcc cannot contract `a * b + c` into an FMA
// the CPU (generic x86-64, no FMA) never does; on the host a plain `*`.
#pragma once
#include <math.h>

#include "ops/elementwise/scalar.h"

namespace twinfer::rnn {

enum class Cell { kRNN, kGRU, kLSTM };

TWINFER_HD int gates_of(Cell c) { return c == Cell::kLSTM ? 4 : c == Cell::kGRU ? 3 : 1; }
TWINFER_HD int acts_of(Cell c) { return c == Cell::kLSTM ? 3 : c == Cell::kGRU ? 2 : 1; }

TWINFER_HD float rnn_mul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
TWINFER_HD double rnn_mul(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

// std::min / std::max's rules (NaN in `v` picks as they do): min(a, b) =
// b < a ? b : a, max(a, b) = a < b ? b : a.
template <typename C> TWINFER_HD C min_of(C a, C b) { return b < a ? b : a; }
template <typename C> TWINFER_HD C max_of(C a, C b) { return a < b ? b : a; }

// clip applied to a gate's pre-activation: max(-clip, min(clip, v)).
template <typename C> TWINFER_HD C clip_value(bool has_clip, C clip, C v) {
  return has_clip ? max_of(-clip, min_of(clip, v)) : v;
}

enum class ActKind : int { kRelu, kTanh, kSigmoid, kAffine, kLeakyRelu, kThresholdedRelu, kScaledTanh,
                           kHardSigmoid, kElu, kSoftsign, kSoftplus };

struct Act {
  ActKind kind = ActKind::kTanh;
  float alpha = 0.f, beta = 0.f;
  template <typename C>
  TWINFER_HD C operator()(C x) const {
    const C a = static_cast<C>(alpha), b = static_cast<C>(beta);
    switch (kind) {
      case ActKind::kRelu: return x > C(0) ? x : C(0);
      case ActKind::kTanh: return ew::m_tanh(x);
      case ActKind::kSigmoid:
        return x >= C(0) ? C(1) / (C(1) + ew::m_exp(-x)) : ew::m_exp(x) / (C(1) + ew::m_exp(x));
      case ActKind::kAffine: return rnn_mul(a, x) + b;
      case ActKind::kLeakyRelu: return x >= C(0) ? x : rnn_mul(a, x);
      case ActKind::kThresholdedRelu: return x > a ? x : C(0);
      case ActKind::kScaledTanh: return rnn_mul(a, ew::m_tanh(rnn_mul(b, x)));
      case ActKind::kHardSigmoid: return max_of(C(0), min_of(C(1), rnn_mul(a, x) + b));
      case ActKind::kElu: return x >= C(0) ? x : rnn_mul(a, ew::m_exp(x) - C(1));
      case ActKind::kSoftsign: return x / (C(1) + ew::m_abs(x));
      case ActKind::kSoftplus: return ew::m_log1p(ew::m_exp(-ew::m_abs(x))) + max_of(x, C(0));
    }
    return x;
  }
};

}  // namespace twinfer::rnn
