// What describes a unary elementwise op, apart from any backend's kernel:
// its functor (functors.h), the dtypes it accepts, whether the output is
// bool (IsNaN/IsInf), the loop grain, and how the functor is built from the
// node's attributes. The shape rule and the supports() check follow from the
// traits alone. The CPU kernel is unary_kernel.h; the traits of every op are
// named in unary_ops.h and activation_ops.h, which a CUDA file can include.
//
//   struct LeakyReluOp : UnaryTraits<ew::LeakyRelu, kFloatTypes> {
//     static ew::LeakyRelu make(const KernelBuildInfo& i) { return {i.node().attr_float("alpha", 0.01f)}; }
//   };
#pragma once
#include <string>

#include "ops/elementwise/functors.h"
#include "ops/elementwise/typeset.h"
#include "ops/kernel.h"
#include "ops/schema.h"

namespace twinfer::ew {

// Traits of a unary op: its functor, accepted input dtypes, whether the
// output is bool (IsNaN/IsInf) and the loop grain. make() builds the functor
// from the node's attributes; check() rejects attribute values we lack.
template <typename F, unsigned Types, bool BoolOut = false, int64_t Grain = kGrainExpensive>
struct UnaryTraits {
  using Functor = F;
  static constexpr unsigned kTypes = Types;
  static constexpr bool kBoolOut = BoolOut;
  static constexpr int64_t kGrain = Grain;
  static F make(const KernelBuildInfo&) { return F{}; }
  static bool check(const KernelBuildInfo&, std::string*) { return true; }
};

template <typename Op>
bool unary_supports(const KernelBuildInfo& info, std::string* why) {
  return check_input_dtype(info, 0, Op::kTypes, why) && Op::check(info, why);
}

template <typename Op>
void unary_infer(InferContext& c) {
  if (!Op::kBoolOut) return infer_same_as_input0(c);
  const auto& v = c.input(0);
  if (v.has_shape)
    c.set_output(0, DType::kBool, v.shape);
  else
    c.set_output_rank_unknown(0, DType::kBool);
}

}  // namespace twinfer::ew
