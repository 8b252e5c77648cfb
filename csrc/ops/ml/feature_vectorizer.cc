// FeatureVectorizer: its inputs' columns side by side, as float: input i
// ([N, C_i], or one row [C_i]) fills inputdimensions[i] columns (fewer
// columns are padded with zeros, more are cut).
#include "ops/ml/ml_common.h"

namespace twinfer::ml {
namespace {

std::vector<int64_t> widths(const graph::Node& n) {
  const std::vector<int64_t> w = n.attr_ints("inputdimensions");
  for (int64_t d : w)
    if (d < 0) bad_model(n, "inputdimensions must not be negative");
  return w;
}

void vectorizer_infer(InferContext& c) {
  const std::vector<int64_t> w = widths(c.node());
  if (!(w.size() == c.num_inputs()))
    c.fail(ErrorKind::kModelFormat,
           "inputdimensions has " + std::to_string(w.size()) + " entries for " + std::to_string(c.num_inputs()) +
               " inputs");
  int64_t total = 0;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    require_features(c, i);
    total += w[i];
  }
  c.set_output(0, DType::kFloat32, {rows_dim(c, 0), Dim(total)});
}

class FeatureVectorizerKernel final : public MlKernel {
 public:
  explicit FeatureVectorizerKernel(const KernelBuildInfo& info) : MlKernel(info), widths_(widths(info.node())) {
    for (int64_t w : widths_) total_ += w;
  }

  void run(KernelContext& ctx) const override {
    const int64_t n = rows_of(ctx.inputs[0].shape).n;
    float* y = ctx.outputs[0].as<float>();
    std::fill(y, y + n * total_, 0.f);
    int64_t at = 0;
    for (size_t i = 0; i < ctx.inputs.size(); ++i) {
      const Rows r = rows_of(ctx.inputs[i].shape);
      if (r.n != n) fail(ErrorKind::kShape, "input " + std::to_string(i) + " has " + std::to_string(r.n) +
                                                " rows; input 0 has " + std::to_string(n));
      const std::vector<float> x = as_floats(ctx.inputs[i]);
      const int64_t take = std::min(r.f, widths_[i]);
      for (int64_t row = 0; row < n; ++row)
        std::copy_n(x.data() + row * r.f, take, y + row * total_ + at);
      at += widths_[i];
    }
  }

 private:
  std::vector<int64_t> widths_;
  int64_t total_ = 0;
};

bool vectorizer_supports(const KernelBuildInfo& info, std::string* why) {
  for (size_t i = 0; i < info.num_inputs(); ++i)
    if (!features_supported(info, i, why)) return false;
  return true;
}

}  // namespace

TWINFER_REGISTER_SCHEMA("FeatureVectorizer", vectorizer_infer, kMlDomain);
TWINFER_REGISTER_KERNEL("FeatureVectorizer", Backend::kCPU, 0, vectorizer_supports,
                        make_kernel<FeatureVectorizerKernel>, kMlDomain);

}  // namespace twinfer::ml
