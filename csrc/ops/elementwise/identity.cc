// Identity and inference-mode Dropout: the output is the input (a copy here;
// the planner may alias the buffers, in which case the copy is skipped).
// Dropout's optional mask output is all true, as the spec says for
// training_mode = false.
#include <cstring>

#include "core/parallel.h"
#include "ops/elementwise/scalar.h"
#include "ops/elementwise/typeset.h"
#include "ops/schema.h"

namespace twinfer::ew {
namespace {

void copy_view(const TensorView& x, const TensorView& y, int threads) {
  if (x.data == y.data) return;
  const char* src = static_cast<const char*>(x.data);
  char* dst = static_cast<char*>(y.data);
  parallel_for(static_cast<int64_t>(x.bytes()), threads, int64_t(1) << 20,
               [&](int64_t b, int64_t e) { std::memcpy(dst + b, src + b, e - b); });
}

class CopyKernel final : public Kernel {
 public:
  explicit CopyKernel(const KernelBuildInfo&) {}
  void run(KernelContext& ctx) const override {
    copy_view(ctx.inputs[0], ctx.outputs[0], ctx.num_threads);
    // Dropout's mask (output 1), when asked for.
    if (ctx.outputs.size() > 1 && ctx.outputs[1].data)
      std::memset(ctx.outputs[1].data, 1, ctx.outputs[1].numel());
  }
};

bool identity_supports(const KernelBuildInfo& info, std::string* why) {
  return check_input_dtype(info, 0, kAllTypes, why);
}

void dropout_infer(InferContext& c) {
  infer_same_as_input0(c);
  if (c.has_output(1)) {
    const auto& v = c.input(0);
    if (v.has_shape)
      c.set_output(1, DType::kBool, v.shape);
    else
      c.set_output_rank_unknown(1, DType::kBool);
  }
}

// Reads a one-element constant input as double; false when absent/not constant.
bool constant_scalar(const KernelBuildInfo& info, size_t i, double* v) {
  const Tensor* t = info.input_constant(i);
  if (!t || t->numel() != 1 || !in_typeset(kAllTypes, t->dtype())) return false;
  dispatch_typeset<kAllTypes>(t->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    *v = static_cast<double>(load(*t->data_as<T>()));
  });
  return true;
}

// Inference only: training_mode (opset 12+) must be absent or a constant
// false, or the dropout must be a no-op anyway (ratio 0).
bool dropout_supports(const KernelBuildInfo& info, std::string* why) {
  if (!identity_supports(info, why)) return false;
  if (!info.has_input(2)) return true;
  double training = 0, ratio = 0.5;
  if (!constant_scalar(info, 2, &training)) {
    if (why) *why = "Dropout training_mode must be a constant (twinfer runs inference only)";
    return false;
  }
  if (training == 0) return true;
  if (info.has_input(1) && constant_scalar(info, 1, &ratio) && ratio == 0) return true;
  if (why) *why = "Dropout in training mode is not supported (twinfer runs inference only)";
  return false;
}

}  // namespace

TWINFER_REGISTER_SCHEMA("Identity", infer_same_as_input0);
TWINFER_REGISTER_KERNEL("Identity", Backend::kCPU, 0, identity_supports, make_kernel<CopyKernel>);
TWINFER_REGISTER_SCHEMA("Dropout", dropout_infer);
TWINFER_REGISTER_KERNEL("Dropout", Backend::kCPU, 0, dropout_supports, make_kernel<CopyKernel>);

}  // namespace twinfer::ew
