// The CPU kernel shared by all unary elementwise ops: one flat parallel loop
// that loads each element into its compute type, applies the op's functor
// (functors.h) and stores the result. An op is described by a small traits
// struct (unary_traits.h; every op's in unary_ops.h / activation_ops.h) and
// registered with one line:
//
//   TWINFER_REGISTER_UNARY("LeakyRelu", LeakyReluOp);
#pragma once
#include <type_traits>

#include "core/parallel.h"
#include "ops/elementwise/unary_traits.h"

namespace twinfer::ew {

// y[i] = store(f(load(x[i]))) over n elements. The functor is copied into
// the loop (its parameters, an alpha, then stay in registers: a store to y
// may not alias them), so the loop vectorises; the files that instantiate it
// build without trapping math (CMakeLists.txt), so a select such as
// LeakyRelu's x < 0 ? alpha x : x is computed both ways and blended instead
// of a branch that mispredicts on every other element.
template <typename S, typename O, typename F>
void unary_apply(const S* x, O* y, int64_t n, const F& f, int threads, int64_t grain) {
  parallel_for(n, threads, grain, [&, f](int64_t b, int64_t e) {
    const F fn = f;
    for (int64_t i = b; i < e; ++i) y[i] = store<O>(fn(load(x[i])));
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

}  // namespace twinfer::ew

// Registers the shape rule and the CPU kernel of a unary op (traits may be a
// template-id with commas, hence the variadic tail).
#define TWINFER_REGISTER_UNARY(op, ...)                                                     \
  TWINFER_REGISTER_SCHEMA(op, (::twinfer::ew::unary_infer<__VA_ARGS__>));                  \
  TWINFER_REGISTER_KERNEL(op, ::twinfer::Backend::kCPU, 0,                                  \
                          (::twinfer::ew::unary_supports<__VA_ARGS__>),                     \
                          (::twinfer::make_kernel<::twinfer::ew::UnaryKernel<__VA_ARGS__>>))
