// CUDA kernels of the ops whose output is their input's bytes (Identity,
// inference Dropout, Reshape, Flatten, Squeeze, Unsqueeze, BitCast): one
// device-to-device copy in stream order, no kernel launch of our own.
#include "backends/cuda/kernel_util.h"
#include "ops/elementwise/typeset.h"

namespace twinfer::cuda {
namespace {

bool copy_supports(const KernelBuildInfo& info, std::string* why) {
  return ew::check_input_dtype(info, 0, ew::kAllTypes, why);
}

// BitCast's shape rule has checked the widths; any dtype's bytes copy.
bool bitcast_supports(const KernelBuildInfo&, std::string*) { return true; }

bool dropout_supports(const KernelBuildInfo& info, std::string* why) {
  // Training mode needs random masks: the CPU kernel rejects it with the reason.
  if (info.has_input(2) && !info.input_constant(2)) {
    if (why) *why = "Dropout's training_mode must be a constant";
    return false;
  }
  if (const Tensor* t = info.has_input(2) ? info.input_constant(2) : nullptr)
    if (t->numel() == 1 && t->dtype() == DType::kBool && *t->data_as<bool>()) {
      if (why) *why = "Dropout in training mode is not supported";
      return false;
    }
  return copy_supports(info, why);
}

class DeviceCopyKernel final : public Kernel {
 public:
  explicit DeviceCopyKernel(const KernelBuildInfo&) {}
  void run(KernelContext& ctx) const override {
    const TensorView& x = ctx.inputs[0];
    const TensorView& y = ctx.outputs[0];
    if (x.data != y.data) ctx.stream->copy(y.data, x.data, x.bytes());
    if (ctx.outputs.size() > 1 && ctx.outputs[1].data)  // Dropout's mask: all true
      ctx.stream->memset(ctx.outputs[1].data, 1, ctx.outputs[1].numel());
  }
  const char* impl_name() const override { return "cuda copy"; }
};

}  // namespace

TWINFER_REGISTER_KERNEL("Identity", Backend::kCUDA, 0, copy_supports, make_kernel<DeviceCopyKernel>);
TWINFER_REGISTER_KERNEL("Dropout", Backend::kCUDA, 0, dropout_supports, make_kernel<DeviceCopyKernel>);
TWINFER_REGISTER_KERNEL("Reshape", Backend::kCUDA, 0, copy_supports, make_kernel<DeviceCopyKernel>);
TWINFER_REGISTER_KERNEL("Flatten", Backend::kCUDA, 0, copy_supports, make_kernel<DeviceCopyKernel>);
TWINFER_REGISTER_KERNEL("Squeeze", Backend::kCUDA, 0, copy_supports, make_kernel<DeviceCopyKernel>);
TWINFER_REGISTER_KERNEL("Unsqueeze", Backend::kCUDA, 0, copy_supports, make_kernel<DeviceCopyKernel>);
TWINFER_REGISTER_KERNEL("BitCast", Backend::kCUDA, 0, bitcast_supports, make_kernel<DeviceCopyKernel>);

}  // namespace twinfer::cuda
