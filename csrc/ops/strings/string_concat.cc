// StringConcat (opset 20): elementwise concatenation of two string tensors,
// with numpy broadcasting.
#include "ops/elementwise/binary_kernel.h"
#include "ops/strings/string_kernel.h"

namespace twinfer::strings {
namespace {

void concat_infer(InferContext& c) {
  require_strings(c, 0, "X");
  require_strings(c, 1, "Y");
  infer_broadcast(c);
}

class StringConcatKernel final : public StringKernel {
 public:
  explicit StringConcatKernel(const KernelBuildInfo& info)
      : StringKernel(info), plan_(ew::plan_for_node(info, {0, 1})) {}

  void run(KernelContext& ctx) const override {
    ew::broadcast_apply2(plan_, ctx.inputs[0].as<const std::string>(), ctx.inputs[1].as<const std::string>(),
                         ctx.outputs[0].as<std::string>(),
                         [](const std::string& a, const std::string& b) { return a + b; }, ctx.num_threads, 256);
  }

 private:
  ew::BroadcastPlan plan_;
};

}  // namespace

TWINFER_REGISTER_SCHEMA("StringConcat", concat_infer);
TWINFER_REGISTER_STRING_KERNEL("StringConcat", 0, nullptr, make_kernel<StringConcatKernel>, "");

}  // namespace twinfer::strings
