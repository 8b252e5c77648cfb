// Cast and CastLike to and from string tensors (the numeric casts are in
// ops/elementwise/cast.cc). As the ONNX spec says: numbers are written
// plainly (floats in their shortest form that reads back to the same value,
// the specials as "INF", "-INF" and "NaN"); strings are read as decimal or
// scientific numbers, "INF"/"+INF"/"-INF"/"NaN" in any case, and a number
// with a fraction cast to an integer type is truncated like any float.
// Anything else is refused with an error naming the element (the spec leaves
// it undefined). bool, the 8-bit floats and the 4-/2-bit types are not cast
// to or from strings.
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "core/dispatch.h"
#include "ops/elementwise/scalar.h"
#include "ops/elementwise/typeset.h"
#include "ops/strings/string_kernel.h"

namespace twinfer::strings {
namespace {

constexpr unsigned kStringCastTypes = ew::kNumericTypes;

template <typename T>
std::string to_text(T v) {
  if constexpr (ew::is_float_v<T>) {
    const auto f = ew::load(v);
    if (std::isnan(f)) return "NaN";
    if (std::isinf(f)) return f > 0 ? "INF" : "-INF";
    char buf[64];
    // half and bfloat16 are written as the float they are.
    const auto r = std::to_chars(buf, buf + sizeof(buf), f);
    return std::string(buf, r.ptr);
  } else {
    return std::to_string(v);
  }
}

bool iequals(const std::string& a, const char* b) {
  size_t i = 0;
  for (; i < a.size() && b[i]; ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return i == a.size() && !b[i];
}

class StringCastKernel final : public StringKernel {
 public:
  explicit StringCastKernel(const KernelBuildInfo& info)
      : StringKernel(info), from_(info.input_dtype(0)), to_(info.output(0).dtype) {}

  void run(KernelContext& ctx) const override {
    const TensorView& x = ctx.inputs[0];
    const TensorView& y = ctx.outputs[0];
    const int64_t n = x.numel();
    if (from_ == DType::kString && to_ == DType::kString) {
      std::copy_n(x.as<const std::string>(), n, y.as<std::string>());
    } else if (to_ == DType::kString) {
      std::string* out = y.as<std::string>();
      ew::dispatch_typeset<kStringCastTypes>(from_, [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* in = x.as<const T>();
        for (int64_t i = 0; i < n; ++i) out[i] = to_text(in[i]);
      });
    } else {
      const std::string* in = x.as<const std::string>();
      ew::dispatch_typeset<kStringCastTypes>(to_, [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* out = y.as<T>();
        for (int64_t i = 0; i < n; ++i) out[i] = parse<T>(in[i], i);
      });
    }
  }

 private:
  template <typename T>
  T parse(const std::string& s, int64_t i) const {
    if constexpr (std::is_integral_v<T>) {
      // Whole numbers exactly (int64 beyond 2^53 too); anything else as a float.
      T v{};
      const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
      if (r.ec == std::errc() && r.ptr == s.data() + s.size()) return v;
    }
    return ew::cast_value<T>(parse_double(s, i));
  }

  double parse_double(const std::string& s, int64_t i) const {
    if (iequals(s, "INF") || iequals(s, "+INF")) return std::numeric_limits<double>::infinity();
    if (iequals(s, "-INF")) return -std::numeric_limits<double>::infinity();
    if (iequals(s, "NaN")) return std::numeric_limits<double>::quiet_NaN();
    char* end = nullptr;
    const double v = s.empty() ? 0.0 : std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size() || std::isspace(static_cast<unsigned char>(s[0])))
      fail(ErrorKind::kInvalidArgument, "element " + std::to_string(i) + " ('" + s + "') is not a number");
    return v;
  }

  DType from_, to_;
};

bool string_cast_supports(const KernelBuildInfo& info, std::string* why) {
  const DType from = info.input_dtype(0), to = info.output(0).dtype;
  if (from != DType::kString && to != DType::kString) return false;  // ops/elementwise/cast.cc's
  const DType other = from == DType::kString ? to : from;
  if (other == DType::kString || ew::in_typeset(kStringCastTypes, other)) return true;
  if (why) *why = std::string("Cast between string and ") + dtype_name(other) + " is not supported";
  return false;
}

}  // namespace

TWINFER_REGISTER_STRING_KERNEL("Cast", 0, string_cast_supports, make_kernel<StringCastKernel>, "");
TWINFER_REGISTER_STRING_KERNEL("CastLike", 0, string_cast_supports, make_kernel<StringCastKernel>, "");

}  // namespace twinfer::strings
