// Binary arithmetic with numpy broadcasting: Add, Sub, Mul, Div, Mod, Pow,
// PRelu, BitShift, BitwiseAnd/Or/Xor. Arithmetic in binary_functors.h.
#include "ops/elementwise/binary_kernel.h"

namespace twinfer::ew {
namespace {

// ---- Mod: fmod=1 is C's fmod (any numeric type); fmod=0 is the remainder
// with the divisor's sign (numpy.mod), for integers and floats.
bool mod_fmod(const KernelBuildInfo& i) { return i.node().attr_int("fmod", 0) != 0; }

using FModOp = BinaryTraits<FMod, kNumericTypes>;
using IntModOp = BinaryTraits<Mod, kNumericTypes>;

bool mod_supports(const KernelBuildInfo& info, std::string* why) {
  if (mod_fmod(info)) return binary_supports<FModOp>(info, why);
  return binary_supports<IntModOp>(info, why);
}
std::unique_ptr<Kernel> make_mod(const KernelBuildInfo& info) {
  if (mod_fmod(info)) return std::make_unique<ChosenKernel>(make_kernel<BinaryKernel<FModOp>>(info));
  return std::make_unique<ChosenKernel>(make_kernel<BinaryKernel<IntModOp>>(info));
}

// ---- BitShift: direction LEFT/RIGHT, unsigned and (opset 28) signed integers.
using ShlOp = BinaryTraits<BitShiftLeft, kIntTypes>;
using ShrOp = BinaryTraits<BitShiftRight, kIntTypes>;

bool bitshift_supports(const KernelBuildInfo& info, std::string* why) {
  std::string d = info.node().attr_string("direction", "");
  if (d != "LEFT" && d != "RIGHT") {
    if (why) *why = "BitShift direction must be 'LEFT' or 'RIGHT', got '" + d + "'";
    return false;
  }
  return binary_supports<ShlOp>(info, why);
}
std::unique_ptr<Kernel> make_bitshift(const KernelBuildInfo& info) {
  if (info.node().attr_string("direction", "") == "LEFT")
    return std::make_unique<ChosenKernel>(make_kernel<BinaryKernel<ShlOp>>(info));
  return std::make_unique<ChosenKernel>(make_kernel<BinaryKernel<ShrOp>>(info));
}

// ---- PRelu: slope broadcasts to X (one direction); output has X's shape.
void prelu_infer(InferContext& c) { infer_same_as_input0(c); }
using PReluOp = BinaryTraits<PRelu, kFloatTypes | kI32 | kI64 | kU32 | kU64>;

// ---- Pow: base T (floats, int32, int64), exponent of any numeric type.
constexpr unsigned kPowBase = kFloatTypes | kI32 | kI64;

bool pow_supports(const KernelBuildInfo& info, std::string* why) {
  return check_input_dtype(info, 0, kPowBase, why) && check_input_dtype(info, 1, kNumericTypes, why);
}

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

TWINFER_REGISTER_BINARY("Add", BinaryTraits<Add, kNumericTypes>);
TWINFER_REGISTER_BINARY("Sub", BinaryTraits<Sub, kNumericTypes>);
TWINFER_REGISTER_BINARY("Mul", BinaryTraits<Mul, kNumericTypes>);
TWINFER_REGISTER_BINARY("Div", BinaryTraits<Div, kNumericTypes>);
TWINFER_REGISTER_BINARY("BitwiseAnd", BinaryTraits<BitwiseAnd, kIntTypes>);
TWINFER_REGISTER_BINARY("BitwiseOr", BinaryTraits<BitwiseOr, kIntTypes>);
TWINFER_REGISTER_BINARY("BitwiseXor", BinaryTraits<BitwiseXor, kIntTypes>);

TWINFER_REGISTER_SCHEMA("Mod", infer_broadcast);
TWINFER_REGISTER_KERNEL("Mod", Backend::kCPU, 0, mod_supports, make_mod);

TWINFER_REGISTER_SCHEMA("BitShift", infer_broadcast);
TWINFER_REGISTER_KERNEL("BitShift", Backend::kCPU, 0, bitshift_supports, make_bitshift);

TWINFER_REGISTER_SCHEMA("PRelu", prelu_infer);
TWINFER_REGISTER_KERNEL("PRelu", Backend::kCPU, 0, binary_supports<PReluOp>,
                        make_kernel<BinaryKernel<PReluOp>>);

TWINFER_REGISTER_SCHEMA("Pow", infer_broadcast);
TWINFER_REGISTER_KERNEL("Pow", Backend::kCPU, 0, pow_supports, make_kernel<PowKernel>);

}  // namespace twinfer::ew
