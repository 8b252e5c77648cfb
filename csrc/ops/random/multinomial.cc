// Multinomial: for each row of x ([batch, classes] unnormalised log
// probabilities, float or double) sample_size class indices drawn with
// probabilities softmax(row); int32 (the default dtype) or int64 out.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/kernel.h"
#include "ops/random/random_stream.h"
#include "ops/schema.h"

namespace twinfer::random {
namespace {

DType multinomial_dtype(const graph::Node& n) {
  return dtype_from_onnx(static_cast<int32_t>(n.attr_int("dtype", 6)));  // 6: int32
}

void multinomial_infer(InferContext& c) {
  const DType in = c.input_dtype(0);
  if (!(in == DType::kFloat32 || in == DType::kFloat64))
    c.fail(ErrorKind::kDType, std::string("input must be float or double, got ") + dtype_name(in));
  const DType t = multinomial_dtype(c.node());
  if (!(t == DType::kInt32 || t == DType::kInt64))
    c.fail(ErrorKind::kDType, std::string("dtype must be int32 or int64, got ") + dtype_name(t));
  const int64_t k = c.node().attr_int("sample_size", 1);
  if (!(k >= 1)) c.fail(ErrorKind::kInvalidArgument, "sample_size must be positive, got " + std::to_string(k));
  Dim batch;
  if (c.input_has_shape(0)) {
    const SymShape& s = c.input_shape(0);
    if (!(s.size() == 2)) c.fail(ErrorKind::kShape, "input must be [batch, classes], got " + sym_shape_str(s));
    batch = s[0];
  }
  c.set_output(0, t, {batch, Dim(k)});
}

class MultinomialKernel final : public Kernel {
 public:
  explicit MultinomialKernel(const KernelBuildInfo& info)
      : stream_(info.node()), samples_(info.node().attr_int("sample_size", 1)) {}
  const char* impl_name() const override { return "random"; }

  void run(KernelContext& ctx) const override {
    const TensorView& x = ctx.inputs[0];
    const TensorView& y = ctx.outputs[0];
    const int64_t batch = x.shape[0], classes = x.shape[1];
    std::mt19937_64 gen = stream_.next();
    std::vector<double> cdf(static_cast<size_t>(classes));
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (int64_t b = 0; b < batch; ++b) {
      // Cumulative softmax of the row, shifted by its maximum for range.
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < classes; ++j) mx = std::max(mx, value(x, b * classes + j));
      double sum = 0;
      for (int64_t j = 0; j < classes; ++j) cdf[j] = (sum += std::exp(value(x, b * classes + j) - mx));
      for (int64_t s = 0; s < samples_; ++s) {
        const double r = u(gen) * sum;
        int64_t j = std::upper_bound(cdf.begin(), cdf.end(), r) - cdf.begin();
        j = std::min(j, classes - 1);
        if (y.dtype == DType::kInt32) y.as<int32_t>()[b * samples_ + s] = static_cast<int32_t>(j);
        else y.as<int64_t>()[b * samples_ + s] = j;
      }
    }
  }

 private:
  static double value(const TensorView& x, int64_t i) {
    return x.dtype == DType::kFloat64 ? x.as<const double>()[i] : x.as<const float>()[i];
  }

  RandomStream stream_;
  int64_t samples_;
};

}  // namespace

TWINFER_REGISTER_SCHEMA("Multinomial", multinomial_infer);
TWINFER_REGISTER_KERNEL("Multinomial", Backend::kCPU, 0, nullptr, make_kernel<MultinomialKernel>);

}  // namespace twinfer::random
