// RegexFullMatch (opset 20): whether each string matches `pattern` as a
// whole. ONNX specifies RE2 syntax; twinfer uses the C++ standard library's
// ECMAScript grammar, which reads the common subset (classes, \w \d \s \b,
// groups, alternation, {m,n} repeats) the same. RE2 features it lacks
// (inline flags like (?i), \pL, [[:alpha:]] inside classes differ) are
// refused when the pattern does not compile, naming the node.
//
// std::regex matches by backtracking, one stack frame per step, so a very
// long input string could exhaust the stack; longer strings than
// kMaxLength are refused with an error instead.
#include <regex>

#include "ops/strings/string_kernel.h"

namespace twinfer::strings {
namespace {

constexpr size_t kMaxLength = 4096;

std::regex compile(const std::string& pattern, const std::string& node, const std::string& op) {
  try {
    return std::regex(pattern, std::regex::ECMAScript | std::regex::optimize);
  } catch (const std::regex_error& e) {
    throw Error(ErrorKind::kUnsupportedOp,
                "pattern '" + pattern + "' is not a regex twinfer can read (" + e.what() +
                    "; it takes the ECMAScript subset of RE2's syntax)",
                node, op);
  }
}

void regex_infer(InferContext& c) {
  require_strings(c, 0, "X");
  compile(c.node().required_attr("pattern").s, c.node().name, c.node().op_type);
  if (c.input_has_shape(0)) c.set_output(0, DType::kBool, c.input_shape(0));
  else c.set_output_rank_unknown(0, DType::kBool);
}

class RegexFullMatchKernel final : public StringKernel {
 public:
  explicit RegexFullMatchKernel(const KernelBuildInfo& info)
      : StringKernel(info), re_(compile(info.node().required_attr("pattern").s, node_, op_)) {}

  void run(KernelContext& ctx) const override {
    const TensorView& x = ctx.inputs[0];
    const std::string* in = x.as<const std::string>();
    bool* out = ctx.outputs[0].as<bool>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      if (in[i].size() > kMaxLength)
        fail(ErrorKind::kInvalidArgument, "element " + std::to_string(i) + " is " + std::to_string(in[i].size()) +
                                              " bytes long; RegexFullMatch takes strings of up to " +
                                              std::to_string(kMaxLength));
      out[i] = std::regex_match(in[i], re_);
    }
  }

 private:
  std::regex re_;
};

}  // namespace

TWINFER_REGISTER_SCHEMA("RegexFullMatch", regex_infer);
TWINFER_REGISTER_STRING_KERNEL("RegexFullMatch", 0, nullptr, make_kernel<RegexFullMatchKernel>, "");

}  // namespace twinfer::strings
