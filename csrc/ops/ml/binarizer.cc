// Binarizer: 1 where X > threshold, else 0, in X's own type.
#include "ops/ml/ml_common.h"

namespace twinfer::ml {
namespace {

void binarizer_infer(InferContext& c) {
  if (!(is_feature_dtype(c.input_dtype(0))))
    c.fail(ErrorKind::kDType,
           std::string("X must be float, double, int32 or int64, got ") + dtype_name(c.input_dtype(0)));
  infer_same_as_input0(c);
}

class BinarizerKernel final : public MlKernel {
 public:
  explicit BinarizerKernel(const KernelBuildInfo& info)
      : MlKernel(info), threshold_(info.node().attr_float("threshold", 0.f)) {}

  void run(KernelContext& ctx) const override {
    const TensorView& x = ctx.inputs[0];
    switch (x.dtype) {
      case DType::kFloat32: go<float>(x, ctx.outputs[0]); break;
      case DType::kFloat64: go<double>(x, ctx.outputs[0]); break;
      case DType::kInt32: go<int32_t>(x, ctx.outputs[0]); break;
      case DType::kInt64: go<int64_t>(x, ctx.outputs[0]); break;
      default: fail(ErrorKind::kDType, std::string("X of type ") + dtype_name(x.dtype));
    }
  }

 private:
  template <typename T>
  void go(const TensorView& x, const TensorView& y) const {
    const T* in = x.as<const T>();
    T* out = y.as<T>();
    // The threshold is a float attribute: compare in double so int64 inputs
    // are not rounded to float first.
    for (int64_t i = 0; i < x.numel(); ++i) out[i] = static_cast<double>(in[i]) > threshold_ ? T(1) : T(0);
  }

  double threshold_;
};

bool binarizer_supports(const KernelBuildInfo& info, std::string* why) { return features_supported(info, 0, why); }

}  // namespace

TWINFER_REGISTER_SCHEMA("Binarizer", binarizer_infer, kMlDomain);
TWINFER_REGISTER_KERNEL("Binarizer", Backend::kCPU, 0, binarizer_supports, make_kernel<BinarizerKernel>, kMlDomain);

}  // namespace twinfer::ml
