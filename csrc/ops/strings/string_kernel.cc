#include "ops/strings/string_kernel.h"

#include <algorithm>
#include <cstring>

namespace twinfer::strings {

void require_strings(const InferContext& c, size_t i, const char* what) {
  if (!(c.input_dtype(i) == DType::kString))
    c.fail(ErrorKind::kDType, std::string(what) + " must be a string tensor, got " + dtype_name(c.input_dtype(i)));
}

bool input_is_strings(const KernelBuildInfo& info, size_t i, std::string* why) {
  if (info.input_dtype(i) == DType::kString) return true;
  if (why) *why = info.node().op_type + " takes string tensors, got " + dtype_name(info.input_dtype(i));
  return false;
}

void DynamicStringKernel::run(KernelContext& ctx) const {
  std::vector<Tensor> outs = run_dynamic(ctx);
  for (size_t o = 0; o < outs.size() && o < ctx.outputs.size(); ++o) {
    const TensorView& y = ctx.outputs[o];
    if (!y.data) continue;
    if (y.shape != outs[o].shape() || y.dtype != outs[o].dtype())
      fail(ErrorKind::kShape, "output " + std::to_string(o) + " was expected as " + shape_str(y.shape) + ", made " +
                                  shape_str(outs[o].shape()));
    if (y.dtype == DType::kString)
      std::copy_n(outs[o].data_as<const std::string>(), outs[o].numel(), y.as<std::string>());
    else if (outs[o].bytes())
      std::memcpy(y.data, outs[o].data(), outs[o].bytes());
  }
}

std::u32string utf8_decode(const std::string& s, const std::string& node, const std::string& op) {
  std::u32string out;
  out.reserve(s.size());
  auto bad = [&] { throw Error(ErrorKind::kInvalidArgument, "'" + s + "' is not valid UTF-8", node, op); };
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (!len || i + len > s.size()) bad();
    char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < len; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc >> 6) != 0x2) bad();
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    static const char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) bad();
    out.push_back(cp);
    i += len;
  }
  return out;
}

std::string utf8_encode(const std::u32string& s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) {
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  return out;
}

}  // namespace twinfer::strings
