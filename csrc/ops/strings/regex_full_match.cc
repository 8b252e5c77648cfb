// RegexFullMatch (opset 20): whether each string matches `pattern` as a
// whole. ONNX specifies RE2 syntax; twinfer uses the C++ standard library's
// ECMAScript grammar, which reads the common subset (classes, \w \d \s \b,
// groups, alternation, {m,n} repeats) the same. RE2 features it lacks
// (inline flags like (?i), \pL, [[:alpha:]] inside classes differ) are
// refused when the pattern does not compile, naming the node.
//
// std::regex matches by backtracking, one stack frame per step, so a very
// long input string could exhaust the stack; longer strings than
// kMaxLength are refused with an error instead. Its compiler recurses once
// per group, and it has no step budget: patterns nested deeper than
// kMaxNesting groups, longer than kMaxPattern, or repeating a group that
// itself repeats ((a+)+, (\w*)*: exponential time on a near-match) are
// refused at load, naming the node. (An alternation of overlapping choices
// under a repeat, (a|a)*, is not caught.)
#include <regex>
#include <vector>

#include "ops/strings/string_kernel.h"

namespace twinfer::strings {
namespace {

constexpr size_t kMaxLength = 4096;
constexpr size_t kMaxPattern = 1024;
constexpr size_t kMaxNesting = 32;

bool is_repeat(char ch) { return ch == '*' || ch == '+' || ch == '{'; }

// An open group while the pattern is read: whether something in it
// repeats, and whether it begins with a literal character (a delimiter the
// repeat cannot also match, as the "." of (\.\d+)*, keeps a repeated group
// from matching the same text in many ways: no exponential backtracking).
struct Group {
  bool repeats = false;
  int atoms = 0;
  bool literal_first = false;  // the first atom is a literal, matched exactly once
};

void check_pattern(const std::string& p, const std::string& node, const std::string& op) {
  const auto refuse = [&](const std::string& why) {
    throw Error(ErrorKind::kUnsupportedOp, "pattern of " + std::to_string(p.size()) + " characters: " + why +
                                               " (std::regex backtracks with no step limit)", node, op);
  };
  if (p.size() > kMaxPattern) refuse("longer than " + std::to_string(kMaxPattern));
  std::vector<Group> open;
  const auto atom = [&](bool literal) {
    if (open.empty()) return;
    if (open.back().atoms++ == 0) open.back().literal_first = literal;
  };
  // A repeat (or ?) right after a group's first atom: that atom is no
  // delimiter, as the a of (a+)+ is not.
  const auto quantified = [&](bool repeats) {
    if (open.empty()) return;
    if (open.back().atoms == 1) open.back().literal_first = false;
    if (repeats) open.back().repeats = true;
  };
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char ch = p[i];
    if (in_class) {
      if (ch == '\\') ++i;
      else in_class = ch != ']';
      continue;
    }
    if (ch == '\\') {
      const char next = i + 1 < p.size() ? p[i + 1] : '\0';
      atom(std::string("dDwWsSbB").find(next) == std::string::npos);  // \. is a literal, \w a class
      ++i;
    } else if (ch == '[') {
      atom(false);
      in_class = true;
    } else if (ch == '(') {
      atom(false);
      open.push_back(Group{});
      if (open.size() > kMaxNesting) refuse("groups nested deeper than " + std::to_string(kMaxNesting));
      if (i + 2 < p.size() && p[i + 1] == '?' && p[i + 2] == ':') i += 2;  // (?:...) is a group too
    } else if (ch == ')' && !open.empty()) {
      const Group g = open.back();
      open.pop_back();
      const bool repeated = i + 1 < p.size() && is_repeat(p[i + 1]);
      if (g.repeats && repeated && !g.literal_first)
        refuse("a repeated group that itself repeats, as (a+)+, can take exponential time");
      if ((g.repeats || repeated) && !open.empty()) open.back().repeats = true;
    } else if (ch == '|') {
      if (!open.empty()) open.back().literal_first = false;  // another choice may begin otherwise
    } else if (is_repeat(ch)) {
      quantified(true);
      if (ch == '{')
        while (i + 1 < p.size() && p[i] != '}') ++i;  // {m,n} is one quantifier
    } else if (ch == '?') {
      quantified(false);
    } else if (ch != '^' && ch != '$') {
      atom(ch != '.');
    }
  }
}

std::regex compile(const std::string& pattern, const std::string& node, const std::string& op) {
  check_pattern(pattern, node, op);
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
