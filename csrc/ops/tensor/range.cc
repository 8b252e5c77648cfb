// Range(start, limit, delta): output[i] = start + i * delta, with
// max(ceil((limit - start) / delta), 0) elements. The length needs the
// values, so the shape is known only when the three inputs are constants
// (they usually are, or fold to constants once input shapes are concrete).
#include <cmath>
#include <cstdio>
#include <string>

#include "core/shape_limits.h"
#include "ops/elementwise/scalar.h"
#include "ops/elementwise/typeset.h"
#include "ops/tensor/tensor_util.h"

namespace twinfer::tensor {
namespace {

constexpr unsigned kRangeTypes = ew::kFloatTypes | ew::kI16 | ew::kI32 | ew::kI64;  // 16-bit floats computed in float

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// The element count, refused (kInvalidArgument) when it cannot be one: a
// NaN or infinite bound or step (the count would be a float-to-int cast of
// NaN or infinity, undefined in C++), or more elements than a tensor holds.
template <typename T, typename Ctx>
int64_t range_length(const Ctx& c, T start, T limit, T delta) {
  if constexpr (std::is_integral_v<T>) {
    // In 128 bits: limit - start of two int64 may overflow int64.
    const __int128 diff = static_cast<__int128>(limit) - static_cast<__int128>(start), d = delta;
    if (diff == 0 || (diff > 0) != (d > 0)) return 0;
    const __int128 count = d > 0 ? (diff + d - 1) / d : (diff + d + 1) / d;
    if (count > kMaxElements)
      c.fail(ErrorKind::kInvalidArgument, "the range would have more elements than a tensor can hold (2^47)");
    return static_cast<int64_t>(count);
  } else {
    if (!std::isfinite(static_cast<double>(start)) || !std::isfinite(static_cast<double>(limit)) ||
        !std::isfinite(static_cast<double>(delta)))
      c.fail(ErrorKind::kInvalidArgument, "start, limit and delta must be finite, got " +
                                              num(static_cast<double>(start)) + ", " + num(static_cast<double>(limit)) +
                                              ", " + num(static_cast<double>(delta)));
    const double n = std::ceil(static_cast<double>(limit - start) / static_cast<double>(delta));
    if (!(n <= double(kMaxElements)))
      c.fail(ErrorKind::kInvalidArgument, "the range would have " + num(n) +
                                              " elements, more than a tensor can hold (2^47)");
    return n > 0 ? static_cast<int64_t>(n) : 0;
  }
}

// The length for three scalar tensors of one dtype; fails for delta == 0.
template <typename Ctx>
int64_t range_length(const Ctx& c, const Tensor& s, const Tensor& l, const Tensor& d) {
  int64_t n = 0;
  ew::dispatch_typeset<kRangeTypes>(s.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = ew::compute_t<T>;
    const C delta = ew::load(*d.data_as<T>());
    if (delta == C(0)) c.fail(ErrorKind::kInvalidArgument, "delta is 0");
    n = range_length<C>(c, ew::load(*s.data_as<T>()), ew::load(*l.data_as<T>()), delta);
  });
  return n;
}

void range_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  if (!(ew::in_typeset(kRangeTypes, dt)))
    c.fail(ErrorKind::kDType, std::string("Range does not support dtype ") + dtype_name(dt));
  for (size_t i = 0; i < 3; ++i) {
    if (!(c.input_dtype(i) == dt)) c.fail(ErrorKind::kDType, "start, limit and delta must have one dtype");
    if (c.input_has_shape(i))
      if (!(c.input_shape(i).empty() || (c.input_shape(i).size() == 1 && c.input_shape(i)[0] == Dim(1))))
        c.fail(ErrorKind::kShape, "input " + std::to_string(i) + " must be a scalar");
  }
  const Tensor *s = c.input_constant(0), *l = c.input_constant(1), *d = c.input_constant(2);
  if (!s || !l || !d) return c.set_output(0, dt, unknown_dims(1));
  c.set_output(0, dt, SymShape{Dim(range_length(c, *s, *l, *d))});
}

class RangeKernel final : public Kernel {
 public:
  explicit RangeKernel(const KernelBuildInfo&) {}
  void run(KernelContext& ctx) const override {
    const TensorView& y = ctx.outputs[0];
    ew::dispatch_typeset<kRangeTypes>(y.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = ew::compute_t<T>;
      const C start = ew::load(*ctx.inputs[0].as<const T>()), delta = ew::load(*ctx.inputs[2].as<const T>());
      T* p = y.as<T>();
      const int64_t n = y.numel();
      for (int64_t i = 0; i < n; ++i) p[i] = ew::store<T>(static_cast<C>(start + static_cast<C>(i) * delta));
    });
  }
};

bool range_supports(const KernelBuildInfo& info, std::string* why) {
  return ew::check_input_dtype(info, 0, kRangeTypes, why) && ew::check_same_dtype(info, {0, 1, 2}, why);
}

}  // namespace

TWINFER_REGISTER_SCHEMA("Range", range_infer);
TWINFER_REGISTER_KERNEL("Range", Backend::kCPU, 0, range_supports, make_kernel<RangeKernel>);

}  // namespace twinfer::tensor
