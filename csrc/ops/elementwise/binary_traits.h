// What describes a binary elementwise op (arithmetic, comparisons, logic,
// bitwise), apart from any backend's kernel: its functor
// (binary_functors.h), accepted dtypes, bool output or not, loop grain, and
// how the functor is built from the node's attributes; Lift2 runs a functor
// on storage types. The shape rule and the supports() check follow from the
// traits alone. The CPU kernel is binary_kernel.h; the traits of every op are
// named in binary_ops.h and compare_ops.h, which a CUDA file can include.
#pragma once
#include <string>

#include "ops/elementwise/binary_functors.h"
#include "ops/elementwise/typeset.h"
#include "ops/kernel.h"
#include "ops/schema.h"

namespace twinfer::ew {

// Storage in, storage out: loads 16-bit floats into float, applies f, rounds
// the result into Out.
template <typename Out, typename F>
struct Lift2 {
  F f;
  template <typename A, typename B> TWINFER_HD Out operator()(A a, B b) const {
    return store<Out>(f(load(a), load(b)));
  }
};

template <typename F, unsigned Types, bool BoolOut = false, int64_t Grain = kGrainCheap>
struct BinaryTraits {
  using Functor = F;
  static constexpr unsigned kTypes = Types;
  static constexpr bool kBoolOut = BoolOut;
  static constexpr int64_t kGrain = Grain;
  static F make(const KernelBuildInfo&) { return F{}; }
  static bool check(const KernelBuildInfo&, std::string*) { return true; }
};

template <typename Op>
bool binary_supports(const KernelBuildInfo& info, std::string* why) {
  return check_same_dtype(info, {0, 1}, why) && check_input_dtype(info, 0, Op::kTypes, why) &&
         Op::check(info, why);
}

template <typename Op>
void binary_infer(InferContext& c) {
  if (Op::kBoolOut)
    infer_broadcast_bool(c);
  else
    infer_broadcast(c);
}

}  // namespace twinfer::ew
