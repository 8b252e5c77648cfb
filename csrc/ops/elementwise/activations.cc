// Activation functions: Sigmoid, Softplus, Softsign, Relu, LeakyRelu, Elu,
// Selu, Celu, ThresholdedRelu, HardSigmoid, HardSwish, Mish, Gelu, Shrink.
// The arithmetic is in functors.h; here: dtypes and attribute parsing.
#include <memory>

#include "ops/elementwise/unary_kernel.h"

namespace twinfer::ew {
namespace {

template <typename F>
using FloatAct = UnaryTraits<F, kFloatTypes>;

struct LeakyReluOp : UnaryTraits<LeakyRelu, kFloatTypes, false, kGrainCheap> {
  static LeakyRelu make(const KernelBuildInfo& i) { return {i.node().attr_float("alpha", 0.01f)}; }
};
struct EluOp : FloatAct<Elu> {
  static Elu make(const KernelBuildInfo& i) { return {i.node().attr_float("alpha", 1.0f)}; }
};
struct SeluOp : FloatAct<Selu> {
  static Selu make(const KernelBuildInfo& i) {
    Selu s;
    s.alpha = i.node().attr_float("alpha", s.alpha);
    s.gamma = i.node().attr_float("gamma", s.gamma);
    return s;
  }
};
struct CeluOp : FloatAct<Celu> {
  static Celu make(const KernelBuildInfo& i) { return {i.node().attr_float("alpha", 1.0f)}; }
  static bool check(const KernelBuildInfo& i, std::string* why) {
    if (i.node().attr_float("alpha", 1.0f) != 0.0f) return true;
    if (why) *why = "Celu needs a non-zero alpha";
    return false;
  }
};
struct ThresholdedReluOp : UnaryTraits<ThresholdedRelu, kFloatTypes, false, kGrainCheap> {
  static ThresholdedRelu make(const KernelBuildInfo& i) { return {i.node().attr_float("alpha", 1.0f)}; }
};
struct HardSigmoidOp : UnaryTraits<HardSigmoid, kFloatTypes, false, kGrainCheap> {
  static HardSigmoid make(const KernelBuildInfo& i) {
    return {i.node().attr_float("alpha", 0.2f), i.node().attr_float("beta", 0.5f)};
  }
};
struct ShrinkOp : UnaryTraits<Shrink, kNumericTypes, false, kGrainCheap> {
  static Shrink make(const KernelBuildInfo& i) {
    return {i.node().attr_float("bias", 0.0f), i.node().attr_float("lambd", 0.5f)};
  }
};

// Gelu (opset 20): the approximate attribute picks one of two functors when
// the kernel is built, so the per-element loop has no mode branch.
bool gelu_check(const KernelBuildInfo& i, std::string* why) {
  std::string a = i.node().attr_string("approximate", "none");
  if (a == "none" || a == "tanh") return true;
  if (why) *why = "Gelu approximate='" + a + "' is not supported (expected 'none' or 'tanh')";
  return false;
}
struct GeluOp : FloatAct<Gelu> {
  static bool check(const KernelBuildInfo& i, std::string* why) { return gelu_check(i, why); }
};
struct GeluTanhOp : FloatAct<GeluTanh> {};

class GeluKernel final : public Kernel {
 public:
  explicit GeluKernel(const KernelBuildInfo& info) {
    if (info.node().attr_string("approximate", "none") == "tanh")
      impl_ = make_kernel<UnaryKernel<GeluTanhOp>>(info);
    else
      impl_ = make_kernel<UnaryKernel<GeluOp>>(info);
  }
  void run(KernelContext& ctx) const override { impl_->run(ctx); }

 private:
  std::unique_ptr<Kernel> impl_;
};

}  // namespace

TWINFER_REGISTER_UNARY("Sigmoid", FloatAct<Sigmoid>);
TWINFER_REGISTER_UNARY("Softplus", FloatAct<Softplus>);
TWINFER_REGISTER_UNARY("Softsign", FloatAct<Softsign>);
TWINFER_REGISTER_UNARY("Relu", UnaryTraits<Relu, kSignedTypes, false, kGrainCheap>);
TWINFER_REGISTER_UNARY("LeakyRelu", LeakyReluOp);
TWINFER_REGISTER_UNARY("Elu", EluOp);
TWINFER_REGISTER_UNARY("Selu", SeluOp);
TWINFER_REGISTER_UNARY("Celu", CeluOp);
TWINFER_REGISTER_UNARY("ThresholdedRelu", ThresholdedReluOp);
TWINFER_REGISTER_UNARY("HardSigmoid", HardSigmoidOp);
TWINFER_REGISTER_UNARY("HardSwish", UnaryTraits<HardSwish, kFloatTypes, false, kGrainCheap>);
TWINFER_REGISTER_UNARY("Mish", FloatAct<Mish>);
TWINFER_REGISTER_UNARY("Shrink", ShrinkOp);

TWINFER_REGISTER_SCHEMA("Gelu", infer_same_as_input0);
TWINFER_REGISTER_KERNEL("Gelu", Backend::kCPU, 0, unary_supports<GeluOp>, make_kernel<GeluKernel>);

}  // namespace twinfer::ew
