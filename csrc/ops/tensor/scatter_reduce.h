// The scatter ops' `reduction` attribute (ScatterElements / Scatter /
// ScatterND: none always, add/mul since opset 16, max/min since 18) and the
// rule that folds one update into one element, written once for the CPU
// kernels (ops/tensor/scatter.cc) and the CUDA ones
// (backends/cuda/scatter.cu), so both combine in the same type: 16-bit
// floats in float, rounded back each step; max/min as std::max/std::min (a
// NaN update leaves the element, a NaN element stays); bool as or/and.
#pragma once
#include <string>
#include <type_traits>

#include "core/error.h"
#include "ops/elementwise/scalar.h"

namespace twinfer::tensor {

enum class ScatterReduction : int { kNone, kAdd, kMul, kMax, kMin };

// The node's reduction (host only); an unknown one, or one newer than the
// node's opset, fails through the context.
template <typename Ctx>
ScatterReduction scatter_reduction_of(const Ctx& c) {
  const std::string r = c.node().attr_string("reduction", "none");
  if (r == "none") return ScatterReduction::kNone;
  if (r == "add" && c.opset() >= 16) return ScatterReduction::kAdd;
  if (r == "mul" && c.opset() >= 16) return ScatterReduction::kMul;
  if (r == "max" && c.opset() >= 18) return ScatterReduction::kMax;
  if (r == "min" && c.opset() >= 18) return ScatterReduction::kMin;
  c.fail(ErrorKind::kInvalidArgument, "reduction '" + r + "' is not supported at opset " + std::to_string(c.opset()));
}

// dst = reduce(dst, src) for one element of storage type T.
template <typename T>
TWINFER_HD void scatter_combine(T& dst, const T& src, ScatterReduction r) {
  if constexpr (std::is_same<T, bool>::value) {
    switch (r) {
      case ScatterReduction::kNone: dst = src; return;
      case ScatterReduction::kAdd: case ScatterReduction::kMax: dst = dst || src; return;
      case ScatterReduction::kMul: case ScatterReduction::kMin: dst = dst && src; return;
    }
  } else {
    using C = ew::compute_t<T>;
    const C a = ew::load(dst), b = ew::load(src);
    switch (r) {
      case ScatterReduction::kNone: dst = src; return;
      case ScatterReduction::kAdd: dst = ew::store<T>(static_cast<C>(a + b)); return;
      case ScatterReduction::kMul: dst = ew::store<T>(static_cast<C>(a * b)); return;
      case ScatterReduction::kMax: dst = ew::store<T>(a < b ? b : a); return;  // std::max(a, b)
      case ScatterReduction::kMin: dst = ew::store<T>(b < a ? b : a); return;  // std::min(a, b)
    }
  }
}

}  // namespace twinfer::tensor
