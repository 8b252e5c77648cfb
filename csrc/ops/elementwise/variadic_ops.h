// The variadic broadcasting reductions over inputs (Max, Min, Sum, Mean):
// out = f(in0, in1), then out = f(out, in_k) for the rest; Mean divides at
// the end. Each one's traits as a named type, the supports() rule and
// TWINFER_VARIADIC_OPS, the list of (ONNX op, traits) a backend registers
// from (see unary_ops.h). The arithmetic is in binary_functors.h.
#pragma once
#include <string>

#include "ops/elementwise/binary_functors.h"
#include "ops/elementwise/typeset.h"
#include "ops/kernel.h"

namespace twinfer::ew {

// Mean's last step: divide by the input count (as onnxruntime does, rather
// than multiplying by 1/n, which rounds differently).
struct DivideBy {
  double n;
  template <typename T> TWINFER_HD T operator()(T x) const { return x / static_cast<T>(n); }
};

// Mean's last input added and the sum divided in one pass (the CPU kernel
// where the sum is kept in the data's own type): the same two roundings as
// Add then DivideBy, one pass over the output fewer.
struct AddThenDivideBy {
  double n;
  template <typename T> TWINFER_HD T operator()(T x, T y) const { return (x + y) / static_cast<T>(n); }
};

template <typename F, unsigned Types, bool Mean = false>
struct VariadicTraits {
  using Functor = F;
  static constexpr unsigned kTypes = Types;
  static constexpr bool kMean = Mean;
};

using MaxOp = VariadicTraits<Max, kNumericTypes>;
using MinOp = VariadicTraits<Min, kNumericTypes>;
using SumOp = VariadicTraits<Add, kFloatTypes>;
using MeanOp = VariadicTraits<Add, kFloatTypes, true>;

template <typename Op>
bool variadic_supports(const KernelBuildInfo& info, std::string* why) {
  size_t first = info.num_inputs();
  for (size_t i = 0; i < info.num_inputs(); ++i) {
    if (!info.has_input(i)) continue;
    if (first == info.num_inputs()) {
      first = i;
      if (!check_input_dtype(info, i, Op::kTypes, why)) return false;
    } else if (!check_same_dtype(info, {first, i}, why)) {
      return false;
    }
  }
  if (first == info.num_inputs()) {
    if (why) *why = info.node().op_type + " needs at least one input";
    return false;
  }
  return true;
}

}  // namespace twinfer::ew

// X(onnx op name, traits type in twinfer::ew), in registration order.
#define TWINFER_VARIADIC_OPS(X) X("Max", MaxOp) X("Min", MinOp) X("Sum", SumOp) X("Mean", MeanOp)
