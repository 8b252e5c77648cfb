// The activation a fused com.twinfer Conv / Gemm / MatMul node applies to
// its result: attributes `activation` (name) and `activation_params`
// (floats). The reference math lives here so reference kernels and tests of
// the oneDNN kernels share one definition; onednn_common maps it to oneDNN
// eltwise post-ops.
//
//   activation          activation_params          y =
//   ""                  -                          x
//   "Relu"              -                          max(x, 0)
//   "LeakyRelu"         [alpha=0.01]               x >= 0 ? x : alpha*x
//   "Clip"              [min=-inf, max=+inf]       min(max(x, min), max)
//   "Sigmoid"           -                          1 / (1 + exp(-x))
//   "HardSigmoid"       [alpha=0.2, beta=0.5]      max(0, min(1, alpha*x + beta))
//   "HardSwish"         -                          x * max(0, min(1, x/6 + 1/2))
//   "Silu"              -                          x * sigmoid(x)
//   "Gelu"              [approximate=0]            0.5x(1+erf(x/sqrt2)); params[0]!=0: tanh form
//   "Tanh"              -                          tanh(x)
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "graph/ir.h"

namespace twinfer::nn {

enum class ActKind { kNone, kRelu, kLeakyRelu, kClip, kSigmoid, kHardSigmoid, kHardSwish, kSilu, kGelu, kGeluTanh, kTanh };

struct Activation {
  ActKind kind = ActKind::kNone;
  float alpha = 0.f;  // LeakyRelu alpha, Clip min, HardSigmoid alpha
  float beta = 0.f;   // Clip max, HardSigmoid beta

  bool none() const { return kind == ActKind::kNone; }

  template <typename T>
  T apply(T x) const {
    switch (kind) {
      case ActKind::kNone: return x;
      case ActKind::kRelu: return x > T(0) ? x : T(0);
      case ActKind::kLeakyRelu: return x >= T(0) ? x : T(alpha) * x;
      case ActKind::kClip: return std::min(std::max(x, T(alpha)), T(beta));
      case ActKind::kSigmoid: return T(1) / (T(1) + std::exp(-x));
      case ActKind::kHardSigmoid: return std::max(T(0), std::min(T(1), T(alpha) * x + T(beta)));
      case ActKind::kHardSwish: return x * std::max(T(0), std::min(T(1), x / T(6) + T(0.5)));
      case ActKind::kSilu: return x / (T(1) + std::exp(-x));
      case ActKind::kGelu: return T(0.5) * x * (T(1) + std::erf(x * T(0.70710678118654752440)));
      case ActKind::kGeluTanh:
        return T(0.5) * x *
               (T(1) + std::tanh(T(0.79788456080286535588) * (x + T(0.044715) * x * x * x)));
      case ActKind::kTanh: return std::tanh(x);
    }
    return x;
  }
};

// Parses `activation` / `activation_params`; throws Error(kUnsupportedOp)
// naming the node for an unknown name or a wrong number of params.
inline Activation parse_activation(const graph::Node& n) {
  std::string name = n.attr_string("activation", "");
  std::vector<float> p = n.attr_floats("activation_params", {});
  auto need = [&](size_t lo, size_t hi) {
    if (p.size() < lo || p.size() > hi)
      throw Error(ErrorKind::kUnsupportedOp,
                  "activation '" + name + "' takes " + std::to_string(lo) + ".." + std::to_string(hi) +
                      " activation_params, got " + std::to_string(p.size()),
                  n.name, n.op_type);
  };
  Activation a;
  if (name.empty()) { need(0, 0); a.kind = ActKind::kNone; }
  else if (name == "Relu") { need(0, 0); a.kind = ActKind::kRelu; }
  else if (name == "LeakyRelu") { need(0, 1); a.kind = ActKind::kLeakyRelu; a.alpha = p.empty() ? 0.01f : p[0]; }
  else if (name == "Clip") {
    need(0, 2);
    a.kind = ActKind::kClip;
    a.alpha = p.size() > 0 ? p[0] : -std::numeric_limits<float>::infinity();
    a.beta = p.size() > 1 ? p[1] : std::numeric_limits<float>::infinity();
  }
  else if (name == "Sigmoid") { need(0, 0); a.kind = ActKind::kSigmoid; }
  else if (name == "HardSigmoid") {
    need(0, 2);
    a.kind = ActKind::kHardSigmoid;
    a.alpha = p.size() > 0 ? p[0] : 0.2f;
    a.beta = p.size() > 1 ? p[1] : 0.5f;
  }
  else if (name == "HardSwish") { need(0, 0); a.kind = ActKind::kHardSwish; }
  else if (name == "Silu") { need(0, 0); a.kind = ActKind::kSilu; }
  else if (name == "Gelu") { need(0, 1); a.kind = (!p.empty() && p[0] != 0.f) ? ActKind::kGeluTanh : ActKind::kGelu; }
  else if (name == "Tanh") { need(0, 0); a.kind = ActKind::kTanh; }
  else {
    throw Error(ErrorKind::kUnsupportedOp, "unknown fused activation '" + name + "'", n.name, n.op_type);
  }
  return a;
}

}  // namespace twinfer::nn
