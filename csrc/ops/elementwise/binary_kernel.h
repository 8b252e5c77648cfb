// The CPU kernel shared by the binary elementwise ops (arithmetic,
// comparisons, logic, bitwise): a broadcast plan built once for the node's
// shapes (broadcast.h) and the op's functor (binary_functors.h) lifted from
// compute types to storage types (Lift2). An op is described by its traits
// (binary_traits.h; every op's in binary_ops.h / compare_ops.h) and
// registered with one line:
//
//   TWINFER_REGISTER_BINARY("Add", AddOp);
#pragma once
#include <memory>
#include <type_traits>

#include "ops/elementwise/binary_traits.h"
#include "ops/elementwise/broadcast.h"

namespace twinfer::ew {

// Builds the plan for the node's inputs `ins` broadcast to output 0, turning
// a shape mismatch into an error that names the node.
BroadcastPlan plan_for_node(const KernelBuildInfo& info, std::initializer_list<size_t> ins);

template <typename Op>
class BinaryKernel final : public Kernel {
 public:
  explicit BinaryKernel(const KernelBuildInfo& info)
      : f_(Op::make(info)), dtype_(info.input_dtype(0)), plan_(plan_for_node(info, {0, 1})) {}
  // With a plan of the caller's (an op that reads its inputs' shapes its own way).
  BinaryKernel(const KernelBuildInfo& info, BroadcastPlan plan)
      : f_(Op::make(info)), dtype_(info.input_dtype(0)), plan_(std::move(plan)) {}

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
