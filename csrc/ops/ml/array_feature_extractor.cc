// ArrayFeatureExtractor: the elements of X's last dim at the (flattened)
// indices Y, for every leading position; a 1-D X gives one row [1, k], as
// onnxruntime does. Takes numbers and strings.
#include <cstring>

#include "ops/ml/ml_common.h"

namespace twinfer::ml {
namespace {

bool extractable(DType t) { return is_feature_dtype(t) || t == DType::kString; }

void afe_infer(InferContext& c) {
  const DType t = c.input_dtype(0);
  if (!(extractable(t)))
    c.fail(ErrorKind::kDType, std::string("X must be float, double, int32, int64 or string, got ") + dtype_name(t));
  if (!(c.input_dtype(1) == DType::kInt64))
    c.fail(ErrorKind::kDType, std::string("Y (the indices) must be int64, got ") + dtype_name(c.input_dtype(1)));
  if (!c.input_has_shape(0) || !c.input_has_shape(1)) return c.set_output_rank_unknown(0, t);
  SymShape out = c.input_shape(0);
  if (!(!out.empty())) c.fail(ErrorKind::kShape, "X must have at least one dim");
  Dim k(1);
  for (const Dim& d : c.input_shape(1)) k = d.known() && k.known() ? Dim(k.value * d.value) : Dim();
  if (out.size() == 1) out.insert(out.begin(), Dim(1));
  out.back() = k;
  c.set_output(0, t, out);
}

class ArrayFeatureExtractorKernel final : public MlKernel {
 public:
  using MlKernel::MlKernel;

  void run(KernelContext& ctx) const override {
    const TensorView& x = ctx.inputs[0];
    const TensorView& idx = ctx.inputs[1];
    const int64_t c = x.shape.back();
    const int64_t rows = c ? x.numel() / c : 0;
    const int64_t k = idx.numel();
    const int64_t* ix = idx.as<const int64_t>();
    for (int64_t j = 0; j < k; ++j)
      if (ix[j] < 0 || ix[j] >= c)
        fail(ErrorKind::kInvalidArgument, "index " + std::to_string(ix[j]) + " is out of range for a last dim of " +
                                              std::to_string(c));
    if (x.dtype == DType::kString) {
      const std::string* in = x.as<const std::string>();
      std::string* out = ctx.outputs[0].as<std::string>();
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < k; ++j) out[r * k + j] = in[r * c + ix[j]];
      return;
    }
    const size_t es = dtype_size(x.dtype);
    const char* in = static_cast<const char*>(x.data);
    char* out = static_cast<char*>(ctx.outputs[0].data);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < k; ++j) std::memcpy(out + (r * k + j) * es, in + (r * c + ix[j]) * es, es);
  }
};

bool afe_supports(const KernelBuildInfo& info, std::string* why) {
  if (extractable(info.input_dtype(0))) return true;
  if (why) *why = std::string("ArrayFeatureExtractor does not take ") + dtype_name(info.input_dtype(0));
  return false;
}

}  // namespace

TWINFER_REGISTER_SCHEMA("ArrayFeatureExtractor", afe_infer, kMlDomain);
TWINFER_REGISTER_STRING_KERNEL("ArrayFeatureExtractor", 0, afe_supports, make_kernel<ArrayFeatureExtractorKernel>,
                               kMlDomain);

}  // namespace twinfer::ml
