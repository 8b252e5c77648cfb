// Activation functions: Sigmoid, Softplus, Softsign, Relu, LeakyRelu, Elu,
// Selu, Celu, ThresholdedRelu, HardSigmoid, HardSwish, Mish, Gelu, Shrink.
// The arithmetic is in functors.h, dtypes and attribute parsing in
// activation_ops.h; here the shape rules and CPU kernels.
#include <memory>

#include "ops/elementwise/activation_ops.h"
#include "ops/elementwise/unary_kernel.h"

namespace twinfer::ew {
namespace {

class GeluKernel final : public Kernel {
 public:
  explicit GeluKernel(const KernelBuildInfo& info) {
    if (gelu_tanh(info))
      impl_ = make_kernel<UnaryKernel<GeluTanhOp>>(info);
    else
      impl_ = make_kernel<UnaryKernel<GeluOp>>(info);
  }
  void run(KernelContext& ctx) const override { impl_->run(ctx); }

 private:
  std::unique_ptr<Kernel> impl_;
};

}  // namespace

#define TWINFER_EW_REGISTER(op, Traits) TWINFER_REGISTER_UNARY(op, Traits);
TWINFER_ACTIVATION_OPS(TWINFER_EW_REGISTER)
#undef TWINFER_EW_REGISTER

TWINFER_REGISTER_SCHEMA("Gelu", infer_same_as_input0);
TWINFER_REGISTER_KERNEL("Gelu", Backend::kCPU, 0, unary_supports<GeluOp>, make_kernel<GeluKernel>);

}  // namespace twinfer::ew
