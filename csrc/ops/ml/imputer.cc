// Imputer: replaces X's missing values (those equal to replaced_value_float,
// or NaN when that is NaN, its default; replaced_value_int64 for integer X)
// with imputed_value_floats / _int64s, given once or per feature (last dim).
#include <cmath>
#include <limits>

#include "ops/ml/ml_common.h"

namespace twinfer::ml {
namespace {

void imputer_infer(InferContext& c) {
  const DType t = c.input_dtype(0);
  if (!(is_feature_dtype(t)))
    c.fail(ErrorKind::kDType, std::string("X must be float, double, int32 or int64, got ") + dtype_name(t));
  infer_same_as_input0(c);
}

class ImputerKernel final : public MlKernel {
 public:
  explicit ImputerKernel(const KernelBuildInfo& info) : MlKernel(info) {
    const graph::Node& n = info.node();
    floats_ = reals(n, "imputed_value_floats");
    ints_ = n.attr_ints("imputed_value_int64s");
    const bool is_float = dtype_is_float(info.input_dtype(0));
    if (is_float && floats_.empty()) bad_model(n, "a float X needs imputed_value_floats");
    if (!is_float && ints_.empty()) bad_model(n, "an integer X needs imputed_value_int64s");
    replaced_float_ = n.attr_float("replaced_value_float", std::numeric_limits<float>::quiet_NaN());
    replaced_int_ = n.attr_int("replaced_value_int64", 0);
    const Shape x = info.input_shape(0);
    const int64_t f = x.empty() ? 1 : x.back();
    const size_t k = is_float ? floats_.size() : ints_.size();
    if (k != 1 && static_cast<int64_t>(k) != f)
      bad_model(n, "has " + std::to_string(k) + " imputed values; X has " + std::to_string(f) +
                       " features (give one, or one per feature)");
  }

  void run(KernelContext& ctx) const override {
    const TensorView& x = ctx.inputs[0];
    switch (x.dtype) {
      case DType::kFloat32: go<float>(x, ctx.outputs[0], floats_, replaced_float_); break;
      case DType::kFloat64: go<double>(x, ctx.outputs[0], floats_, replaced_float_); break;
      case DType::kInt32: go<int32_t>(x, ctx.outputs[0], ints_, replaced_int_); break;
      case DType::kInt64: go<int64_t>(x, ctx.outputs[0], ints_, replaced_int_); break;
      default: fail(ErrorKind::kDType, std::string("X of type ") + dtype_name(x.dtype));
    }
  }

 private:
  template <typename T, typename V, typename R>
  void go(const TensorView& x, const TensorView& y, const std::vector<V>& values, R replaced) const {
    const T* in = x.as<const T>();
    T* out = y.as<T>();
    const int64_t f = x.shape.empty() ? 1 : x.shape.back();
    bool nan = false;
    if constexpr (std::is_floating_point_v<R>) nan = std::isnan(replaced);
    for (int64_t i = 0; i < x.numel(); ++i) {
      bool missing;
      if constexpr (std::is_floating_point_v<T>) missing = nan ? std::isnan(in[i]) : in[i] == static_cast<T>(replaced);
      else missing = in[i] == static_cast<T>(replaced);
      out[i] = missing ? static_cast<T>(values[values.size() == 1 ? 0 : i % f]) : in[i];
    }
  }

  std::vector<double> floats_;
  std::vector<int64_t> ints_;
  float replaced_float_;
  int64_t replaced_int_;
};

bool imputer_supports(const KernelBuildInfo& info, std::string* why) { return features_supported(info, 0, why); }

}  // namespace

TWINFER_REGISTER_SCHEMA("Imputer", imputer_infer, kMlDomain);
TWINFER_REGISTER_KERNEL("Imputer", Backend::kCPU, 0, imputer_supports, make_kernel<ImputerKernel>, kMlDomain);

}  // namespace twinfer::ml
