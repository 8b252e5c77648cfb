// Scaler: Y = (X - offset) * scale as float, offset and scale given once or
// per feature (the last dim).
#include "ops/ml/ml_common.h"

namespace twinfer::ml {
namespace {

void scaler_infer(InferContext& c) {
  require_features(c, 0);
  const auto& v = c.input(0);
  if (v.has_shape) c.set_output(0, DType::kFloat32, v.shape);
  else c.set_output_rank_unknown(0, DType::kFloat32);
}

class ScalerKernel final : public MlKernel {
 public:
  explicit ScalerKernel(const KernelBuildInfo& info) : MlKernel(info) {
    const graph::Node& n = info.node();
    for (double v : reals(n, "offset")) offset_.push_back(static_cast<float>(v));
    for (double v : reals(n, "scale")) scale_.push_back(static_cast<float>(v));
    const Shape x = info.input_shape(0);
    const int64_t f = x.empty() ? 1 : x.back();
    auto check = [&](const std::vector<float>& v, const char* what) {
      if (v.size() != 1 && static_cast<int64_t>(v.size()) != f)
        bad_model(n, std::string(what) + " has " + std::to_string(v.size()) + " values; X has " + std::to_string(f) +
                         " features (give one, or one per feature)");
    };
    if (offset_.empty()) offset_ = {0.f};
    if (scale_.empty()) scale_ = {1.f};
    check(offset_, "offset");
    check(scale_, "scale");
  }

  void run(KernelContext& ctx) const override {
    const std::vector<float> x = as_floats(ctx.inputs[0]);
    float* y = ctx.outputs[0].as<float>();
    const size_t no = offset_.size(), ns = scale_.size();
    const size_t f = std::max(no, ns);
    for (size_t i = 0; i < x.size(); ++i) {
      const size_t j = i % f;
      y[i] = (x[i] - offset_[no == 1 ? 0 : j]) * scale_[ns == 1 ? 0 : j];
    }
  }

 private:
  std::vector<float> offset_, scale_;
};

bool scaler_supports(const KernelBuildInfo& info, std::string* why) { return features_supported(info, 0, why); }

}  // namespace

TWINFER_REGISTER_SCHEMA("Scaler", scaler_infer, kMlDomain);
TWINFER_REGISTER_KERNEL("Scaler", Backend::kCPU, 0, scaler_supports, make_kernel<ScalerKernel>, kMlDomain);

}  // namespace twinfer::ml
