// The CPU kernel shared by all unary elementwise ops: one flat parallel loop
// that loads each element into its compute type, applies the op's functor
// (functors.h) and stores the result. An op is described by a small traits
// struct and registered with one line:
//
//   struct LeakyReluOp : UnaryTraits<ew::LeakyRelu, kFloatTypes> {
//     static ew::LeakyRelu make(const KernelBuildInfo& i) { return {i.node().attr_float("alpha", 0.01f)}; }
//   };
//   TWINFER_REGISTER_UNARY("LeakyRelu", LeakyReluOp);
#pragma once
#include <string>
#include <type_traits>

#include "core/parallel.h"
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

// y[i] = store(f(load(x[i]))) over n elements.
template <typename S, typename O, typename F>
void unary_apply(const S* x, O* y, int64_t n, const F& f, int threads, int64_t grain) {
  parallel_for(n, threads, grain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = store<O>(f(load(x[i])));
  });
}

template <typename Op>
class UnaryKernel final : public Kernel {
 public:
  explicit UnaryKernel(const KernelBuildInfo& info) : f_(Op::make(info)), dtype_(info.input_dtype(0)) {}

  void run(KernelContext& ctx) const override {
    const TensorView& x = ctx.inputs[0];
    const TensorView& y = ctx.outputs[0];
    dispatch_typeset<Op::kTypes>(dtype_, [&](auto tag) {
      using S = typename decltype(tag)::type;
      using O = std::conditional_t<Op::kBoolOut, bool, S>;
      unary_apply(x.as<const S>(), y.as<O>(), x.numel(), f_, ctx.num_threads, Op::kGrain);
    });
  }

 private:
  typename Op::Functor f_;
  DType dtype_;
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

// Registers the shape rule and the CPU kernel of a unary op (traits may be a
// template-id with commas, hence the variadic tail).
#define TWINFER_REGISTER_UNARY(op, ...)                                                     \
  TWINFER_REGISTER_SCHEMA(op, (::twinfer::ew::unary_infer<__VA_ARGS__>));                  \
  TWINFER_REGISTER_KERNEL(op, ::twinfer::Backend::kCPU, 0,                                  \
                          (::twinfer::ew::unary_supports<__VA_ARGS__>),                     \
                          (::twinfer::make_kernel<::twinfer::ew::UnaryKernel<__VA_ARGS__>>))
