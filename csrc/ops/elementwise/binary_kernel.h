// The CPU kernel shared by the binary elementwise ops (arithmetic,
// comparisons, logic, bitwise): a broadcast plan built once for the node's
// shapes (broadcast.h) and the op's functor (binary_functors.h) lifted from
// compute types to storage types. One line registers an op:
//
//   TWINFER_REGISTER_BINARY("Add", BinaryTraits<ew::Add, kNumericTypes>);
#pragma once
#include <memory>
#include <string>
#include <type_traits>

#include "ops/elementwise/binary_functors.h"
#include "ops/elementwise/broadcast.h"
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

// Builds the plan for the node's inputs `ins` broadcast to output 0, turning
// a shape mismatch into an error that names the node.
BroadcastPlan plan_for_node(const KernelBuildInfo& info, std::initializer_list<size_t> ins);

template <typename Op>
class BinaryKernel final : public Kernel {
 public:
  explicit BinaryKernel(const KernelBuildInfo& info)
      : f_(Op::make(info)), dtype_(info.input_dtype(0)), plan_(plan_for_node(info, {0, 1})) {}

  void run(KernelContext& ctx) const override {
    const TensorView& a = ctx.inputs[0];
    const TensorView& b = ctx.inputs[1];
    const TensorView& y = ctx.outputs[0];
    dispatch_typeset<Op::kTypes>(dtype_, [&](auto tag) {
      using S = typename decltype(tag)::type;
      using O = std::conditional_t<Op::kBoolOut, bool, S>;
      broadcast_apply2(plan_, a.as<const S>(), b.as<const S>(), y.as<O>(),
                       Lift2<O, typename Op::Functor>{f_}, ctx.num_threads, Op::kGrain);
    });
  }

 private:
  typename Op::Functor f_;
  DType dtype_;
  BroadcastPlan plan_;
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

// A kernel that picks one of two implementations from the node's attributes
// when it is built (e.g. Mod's fmod), keeping the choice out of the loop.
class ChosenKernel final : public Kernel {
 public:
  explicit ChosenKernel(std::unique_ptr<Kernel> impl) : impl_(std::move(impl)) {}
  void run(KernelContext& ctx) const override { impl_->run(ctx); }

 private:
  std::unique_ptr<Kernel> impl_;
};

}  // namespace twinfer::ew

#define TWINFER_REGISTER_BINARY(op, ...)                                                    \
  TWINFER_REGISTER_SCHEMA(op, (::twinfer::ew::binary_infer<__VA_ARGS__>));                 \
  TWINFER_REGISTER_KERNEL(op, ::twinfer::Backend::kCPU, 0,                                  \
                          (::twinfer::ew::binary_supports<__VA_ARGS__>),                    \
                          (::twinfer::make_kernel<::twinfer::ew::BinaryKernel<__VA_ARGS__>>))
