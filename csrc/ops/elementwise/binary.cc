// Binary arithmetic with numpy broadcasting: Add, Sub, Mul, Div, Mod, Pow,
// PRelu, BitShift, BitwiseAnd/Or/Xor. Arithmetic in binary_functors.h, each
// op's dtypes and attribute rules in binary_ops.h; here the CPU kernels.
#include "ops/elementwise/binary_kernel.h"
#include "ops/elementwise/binary_ops.h"

namespace twinfer::ew {
namespace {

std::unique_ptr<Kernel> make_mod(const KernelBuildInfo& info) {
  if (mod_fmod(info)) return std::make_unique<ChosenKernel>(make_kernel<BinaryKernel<FModOp>>(info));
  return std::make_unique<ChosenKernel>(make_kernel<BinaryKernel<IntModOp>>(info));
}

std::unique_ptr<Kernel> make_bitshift(const KernelBuildInfo& info) {
  if (bitshift_left(info)) return std::make_unique<ChosenKernel>(make_kernel<BinaryKernel<ShlOp>>(info));
  return std::make_unique<ChosenKernel>(make_kernel<BinaryKernel<ShrOp>>(info));
}

// PRelu's output has X's shape (the slope broadcasts one way).
void prelu_infer(InferContext& c) { infer_same_as_input0(c); }

class PowKernel final : public Kernel {
 public:
  explicit PowKernel(const KernelBuildInfo& info)
      : base_(info.input_dtype(0)), exp_(info.input_dtype(1)), plan_(plan_for_node(info, {0, 1})) {
    // x^2 as x*x: common in normalisation layers, and pow() is slow.
    const Tensor* e = info.input_constant(1);
    if (e && e->numel() == 1) {
      dispatch_typeset<kNumericTypes>(e->dtype(), [&](auto tag) {
        using E = typename decltype(tag)::type;
        square_ = load(*e->data_as<E>()) == 2;
      });
    }
  }

  void run(KernelContext& ctx) const override {
    const TensorView& a = ctx.inputs[0];
    const TensorView& b = ctx.inputs[1];
    const TensorView& y = ctx.outputs[0];
    dispatch_typeset<kPowBase>(base_, [&](auto ta) {
      using A = typename decltype(ta)::type;
      dispatch_typeset<kNumericTypes>(exp_, [&](auto tb) {
        using B = typename decltype(tb)::type;
        if (square_)
          broadcast_apply2(plan_, a.as<const A>(), b.as<const B>(), y.as<A>(), Lift2<A, Square>{},
                           ctx.num_threads, kGrainCheap);
        else
          broadcast_apply2(plan_, a.as<const A>(), b.as<const B>(), y.as<A>(), Lift2<A, Pow>{},
                           ctx.num_threads, kGrainExpensive);
      });
    });
  }

 private:
  DType base_, exp_;
  BroadcastPlan plan_;
  bool square_ = false;
};

}  // namespace

#define TWINFER_EW_REGISTER(op, Traits) TWINFER_REGISTER_BINARY(op, Traits);
TWINFER_BINARY_OPS(TWINFER_EW_REGISTER)
#undef TWINFER_EW_REGISTER

TWINFER_REGISTER_SCHEMA("Mod", infer_broadcast);
TWINFER_REGISTER_KERNEL("Mod", Backend::kCPU, 0, mod_supports, make_mod);

TWINFER_REGISTER_SCHEMA("BitShift", infer_broadcast);
TWINFER_REGISTER_KERNEL("BitShift", Backend::kCPU, 0, bitshift_supports, make_bitshift);

TWINFER_REGISTER_SCHEMA("PRelu", prelu_infer);
TWINFER_REGISTER_KERNEL("PRelu", Backend::kCPU, 0, binary_supports<PReluOp>, make_kernel<BinaryKernel<PReluOp>>);

TWINFER_REGISTER_SCHEMA("Pow", infer_broadcast);
TWINFER_REGISTER_KERNEL("Pow", Backend::kCPU, 0, pow_supports, make_kernel<PowKernel>);

}  // namespace twinfer::ew
