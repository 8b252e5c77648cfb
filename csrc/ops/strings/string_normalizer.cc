// StringNormalizer (opset 10): drops the elements of a [C] or [1, C] string
// tensor that equal a stop word (case-insensitively unless
// is_case_sensitive), then lower- or upper-cases the rest. All dropped
// leaves one "" ([1] or [1, 1]).
//
// Case follows `locale` (default en_US.UTF-8) through the C++ locale's
// wide-character tables. Where that locale is not installed, C.UTF-8 is
// used: glibc gives it the same Unicode case tables.
#include <locale>
#include <set>

#include "ops/strings/string_kernel.h"

namespace twinfer::strings {
namespace {

enum class CaseChange { kNone, kLower, kUpper };

CaseChange case_change_of(const graph::Node& n) {
  const std::string a = n.attr_string("case_change_action", "NONE");
  if (a == "NONE") return CaseChange::kNone;
  if (a == "LOWER") return CaseChange::kLower;
  if (a == "UPPER") return CaseChange::kUpper;
  throw Error(ErrorKind::kInvalidArgument, "case_change_action must be NONE, LOWER or UPPER, got '" + a + "'", n.name,
              n.op_type);
}

std::locale locale_for(const std::string& name) {
  for (const std::string& candidate : {name, std::string("C.UTF-8"), std::string("C.utf8")}) {
    try {
      return std::locale(candidate);
    } catch (const std::runtime_error&) {
    }
  }
  return std::locale::classic();
}

void normalizer_infer(InferContext& c) {
  require_strings(c, 0, "X");
  case_change_of(c.node());
  if (!c.input_has_shape(0)) return c.set_output_rank_unknown(0, DType::kString);
  const SymShape& s = c.input_shape(0);
  if (!(s.size() == 1 || (s.size() == 2 && (!s[0].known() || s[0].value == 1))))
    c.fail(ErrorKind::kShape, "X must be [C] or [1, C], got " + sym_shape_str(s));
  SymShape out = s;
  out.back() = Dim();  // how many are left: known once the values are
  c.set_output(0, DType::kString, out);
}

class StringNormalizerKernel final : public DynamicStringKernel {
 public:
  explicit StringNormalizerKernel(const KernelBuildInfo& info)
      : DynamicStringKernel(info),
        change_(case_change_of(info.node())),
        case_sensitive_(info.node().attr_int("is_case_sensitive", 0) != 0),
        locale_(locale_for(info.node().attr_string("locale", "en_US.UTF-8"))),
        ctype_(&std::use_facet<std::ctype<wchar_t>>(locale_)) {
    if (const graph::Attribute* a = info.node().attr("stopwords"))
      for (const std::string& w : a->strings) stopwords_.insert(case_sensitive_ ? w : fold(w));
  }

  std::vector<Tensor> run_dynamic(KernelContext& ctx) const override {
    const TensorView& x = ctx.inputs[0];
    if (x.rank() == 2 && x.shape[0] != 1) fail(ErrorKind::kShape, "X must be [C] or [1, C], got " + shape_str(x.shape));
    const std::string* in = x.as<const std::string>();
    std::vector<std::string> kept;
    for (int64_t i = 0; i < x.numel(); ++i) {
      if (!stopwords_.empty() && stopwords_.count(case_sensitive_ ? in[i] : fold(in[i]))) continue;
      kept.push_back(change_ == CaseChange::kNone ? in[i] : convert(in[i], change_ == CaseChange::kUpper));
    }
    if (kept.empty()) kept.emplace_back();
    Shape ys = x.shape;
    ys.back() = static_cast<int64_t>(kept.size());
    return {Tensor::strings(ys, std::move(kept))};
  }

 private:
  std::string convert(const std::string& s, bool upper) const {
    std::u32string u = utf8_decode(s, node_, op_);
    for (char32_t& c : u) {
      const wchar_t w = static_cast<wchar_t>(c);
      c = static_cast<char32_t>(upper ? ctype_->toupper(w) : ctype_->tolower(w));
    }
    return utf8_encode(u);
  }
  std::string fold(const std::string& s) const { return convert(s, false); }

  CaseChange change_;
  bool case_sensitive_;
  std::locale locale_;
  const std::ctype<wchar_t>* ctype_;
  std::set<std::string> stopwords_;  // case-folded unless case-sensitive
};

}  // namespace

TWINFER_REGISTER_SCHEMA("StringNormalizer", normalizer_infer);
TWINFER_REGISTER_STRING_KERNEL("StringNormalizer", 0, nullptr, make_kernel<StringNormalizerKernel>, "");

}  // namespace twinfer::strings
