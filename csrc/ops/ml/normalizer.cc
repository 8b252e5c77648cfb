// Normalizer: each row of X ([N, C] or [C]) divided by its MAX (the largest
// value, not the largest magnitude, as the spec's formula and onnxruntime
// have it), L1 or L2 norm, as float; a row whose norm is 0 is left as it is.
#include <cmath>
#include <limits>

#include "ops/ml/ml_common.h"

namespace twinfer::ml {
namespace {

enum class Norm { kMax, kL1, kL2 };

Norm norm_of(const graph::Node& n) {
  const std::string s = n.attr_string("norm", "MAX");
  if (s == "MAX") return Norm::kMax;
  if (s == "L1") return Norm::kL1;
  if (s == "L2") return Norm::kL2;
  throw Error(ErrorKind::kInvalidArgument, "norm must be MAX, L1 or L2, got '" + s + "'", n.name, n.op_type);
}

void normalizer_infer(InferContext& c) {
  require_features(c, 0);
  norm_of(c.node());
  const auto& v = c.input(0);
  if (v.has_shape) c.set_output(0, DType::kFloat32, v.shape);
  else c.set_output_rank_unknown(0, DType::kFloat32);
}

class NormalizerKernel final : public MlKernel {
 public:
  explicit NormalizerKernel(const KernelBuildInfo& info) : MlKernel(info), norm_(norm_of(info.node())) {}

  void run(KernelContext& ctx) const override {
    const Rows r = rows_of(ctx.inputs[0].shape);
    const std::vector<float> x = as_floats(ctx.inputs[0]);
    float* y = ctx.outputs[0].as<float>();
    for (int64_t i = 0; i < r.n; ++i) {
      const float* xi = x.data() + i * r.f;
      float* yi = y + i * r.f;
      float z = 0.f;
      if (norm_ == Norm::kMax) {
        z = std::numeric_limits<float>::lowest();
        for (int64_t j = 0; j < r.f; ++j) z = std::max(z, xi[j]);
      } else if (norm_ == Norm::kL1) {
        for (int64_t j = 0; j < r.f; ++j) z += std::abs(xi[j]);
      } else {
        for (int64_t j = 0; j < r.f; ++j) z += xi[j] * xi[j];
        z = std::sqrt(z);
      }
      for (int64_t j = 0; j < r.f; ++j) yi[j] = z != 0.f ? xi[j] / z : xi[j];
    }
  }

 private:
  Norm norm_;
};

bool normalizer_supports(const KernelBuildInfo& info, std::string* why) { return features_supported(info, 0, why); }

}  // namespace

TWINFER_REGISTER_SCHEMA("Normalizer", normalizer_infer, kMlDomain);
TWINFER_REGISTER_KERNEL("Normalizer", Backend::kCPU, 0, normalizer_supports, make_kernel<NormalizerKernel>, kMlDomain);

}  // namespace twinfer::ml
