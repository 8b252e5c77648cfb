// StringSplit (opset 20): each string split on `delimiter` (on runs of
// whitespace, trimmed, when it is empty or absent), at most `maxsplit` times
// from the left, as Python's str.split does. Output 0 has one more dim, as
// long as the most pieces any element gave, padded with ""; output 1 is the
// number of pieces per element. Output shapes follow from the values.
#include <algorithm>

#include "ops/strings/string_kernel.h"

namespace twinfer::strings {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

std::vector<std::string> split_on(const std::string& s, const std::string& delim, int64_t maxsplit) {
  std::vector<std::string> out;
  size_t start = 0;
  for (int64_t n = 0; maxsplit < 0 || n < maxsplit; ++n) {
    const size_t at = s.find(delim, start);
    if (at == std::string::npos) break;
    out.push_back(s.substr(start, at - start));
    start = at + delim.size();
  }
  out.push_back(s.substr(start));
  return out;
}

// Python's str.split() with no separator: runs of whitespace separate, none
// at either end counts, and after maxsplit splits the rest (its leading
// whitespace dropped, its trailing whitespace kept, as Python does) is the
// last piece.
std::vector<std::string> split_whitespace(const std::string& s, int64_t maxsplit) {
  std::vector<std::string> out;
  size_t i = 0;
  const size_t n = s.size();
  while (true) {
    while (i < n && is_space(s[i])) ++i;
    if (i == n) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      out.push_back(s.substr(i));
      break;
    }
    size_t j = i;
    while (j < n && !is_space(s[j])) ++j;
    out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

void split_infer(InferContext& c) {
  require_strings(c, 0, "X");
  if (!(c.node().attr_int("maxsplit", 0) >= 0 || !c.node().has_attr("maxsplit")))
    c.fail(ErrorKind::kInvalidArgument, "maxsplit must not be negative");
  if (!c.input_has_shape(0)) {
    c.set_output_rank_unknown(0, DType::kString);
    if (c.has_output(1)) c.set_output_rank_unknown(1, DType::kInt64);
    return;
  }
  SymShape s = c.input_shape(0);
  if (c.has_output(1)) c.set_output(1, DType::kInt64, s);
  s.push_back(Dim());  // the most pieces: known once the values are
  c.set_output(0, DType::kString, s);
}

class StringSplitKernel final : public DynamicStringKernel {
 public:
  explicit StringSplitKernel(const KernelBuildInfo& info)
      : DynamicStringKernel(info),
        delimiter_(info.node().attr_string("delimiter", "")),
        maxsplit_(info.node().has_attr("maxsplit") ? info.node().attr_int("maxsplit", 0) : -1) {}

  std::vector<Tensor> run_dynamic(KernelContext& ctx) const override {
    const TensorView& x = ctx.inputs[0];
    const std::string* in = x.as<const std::string>();
    std::vector<std::vector<std::string>> pieces(static_cast<size_t>(x.numel()));
    size_t widest = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      pieces[i] = delimiter_.empty() ? split_whitespace(in[i], maxsplit_) : split_on(in[i], delimiter_, maxsplit_);
      widest = std::max(widest, pieces[i].size());
    }
    Shape ys = x.shape;
    ys.push_back(static_cast<int64_t>(widest));
    Tensor y = Tensor::empty(DType::kString, ys);
    Tensor counts = Tensor::empty(DType::kInt64, x.shape);
    std::string* yp = y.data_as<std::string>();
    for (size_t i = 0; i < pieces.size(); ++i) {
      counts.data_as<int64_t>()[i] = static_cast<int64_t>(pieces[i].size());
      std::move(pieces[i].begin(), pieces[i].end(), yp + i * widest);  // the rest stays ""
    }
    return {y, counts};
  }

 private:
  std::string delimiter_;
  int64_t maxsplit_;  // -1: no limit
};

}  // namespace

TWINFER_REGISTER_SCHEMA("StringSplit", split_infer);
TWINFER_REGISTER_STRING_KERNEL("StringSplit", 0, nullptr, make_kernel<StringSplitKernel>, "");

}  // namespace twinfer::strings
