// Equal on string tensors (numpy broadcasting, bool out); the numeric Equal
// is in ops/elementwise. Its shape rule is the same, so only a kernel here.
#include "ops/elementwise/binary_kernel.h"
#include "ops/strings/string_kernel.h"

namespace twinfer::strings {
namespace {

class StringEqualKernel final : public StringKernel {
 public:
  explicit StringEqualKernel(const KernelBuildInfo& info)
      : StringKernel(info), plan_(ew::plan_for_node(info, {0, 1})) {}

  void run(KernelContext& ctx) const override {
    ew::broadcast_apply2(plan_, ctx.inputs[0].as<const std::string>(), ctx.inputs[1].as<const std::string>(),
                         ctx.outputs[0].as<bool>(),
                         [](const std::string& a, const std::string& b) { return a == b; }, ctx.num_threads, 256);
  }

 private:
  ew::BroadcastPlan plan_;
};

bool string_equal_supports(const KernelBuildInfo& info, std::string* why) {
  return input_is_strings(info, 0, why) && input_is_strings(info, 1, why);
}

}  // namespace

TWINFER_REGISTER_STRING_KERNEL("Equal", 0, string_equal_supports, make_kernel<StringEqualKernel>, "");

}  // namespace twinfer::strings
