// ZipMap: each row of X ([N, C] float scores) as a map from the C class
// labels (classlabels_int64s or classlabels_strings) to its scores; the
// output is a sequence of N maps (core/tensor.h: kSequence of kMap values),
// which Python gets as a list of dicts.
#include "ops/ml/ml_common.h"

namespace twinfer::ml {
namespace {

ClassLabels zipmap_labels(const graph::Node& n) {
  ClassLabels l = class_labels(n, "classlabels_int64s");
  if (l.size() == 0) bad_model(n, "has no classlabels_int64s or classlabels_strings");
  return l;
}

void zipmap_infer(InferContext& c) {
  if (!(c.input_dtype(0) == DType::kFloat32))
    c.fail(ErrorKind::kDType, std::string("X must be float, got ") + dtype_name(c.input_dtype(0)));
  const ClassLabels l = zipmap_labels(c.node());
  if (c.input_known(0)) {
    const Shape x = c.input_values_shape(0);
    if (!(x.size() == 1 || x.size() == 2)) c.fail(ErrorKind::kShape, "X must be [N, C] or [C], got " + shape_str(x));
    if (!(x.back() == static_cast<int64_t>(l.size())))
      c.fail(ErrorKind::kShape,
             "X has " + std::to_string(x.back()) + " columns for " + std::to_string(l.size()) + " class labels");
  }
  c.set_output_container(0, DType::kSequence, {DType::kMap, l.dtype(), DType::kFloat32});
}

class ZipMapKernel final : public MlKernel {
 public:
  explicit ZipMapKernel(const KernelBuildInfo& info) : MlKernel(info) {
    const ClassLabels l = zipmap_labels(info.node());
    const int64_t c = static_cast<int64_t>(l.size());
    keys_ = l.use_strings() ? Tensor::strings({c}, l.strings) : Tensor::empty(DType::kInt64, {c});
    if (!l.use_strings()) std::copy(l.ints.begin(), l.ints.end(), keys_.data_as<int64_t>());
  }

  bool dynamic_outputs() const override { return true; }
  void run(KernelContext&) const override { fail(ErrorKind::kRuntime, "ZipMap's output is a sequence of maps"); }

  std::vector<Tensor> run_dynamic(KernelContext& ctx) const override {
    const TensorView& x = ctx.inputs[0];
    const int64_t c = keys_.numel();
    if (x.shape.empty() || x.shape.size() > 2 || x.shape.back() != c)
      fail(ErrorKind::kShape, "X is " + shape_str(x.shape) + "; it must be [N, " + std::to_string(c) + "]");
    const int64_t rows = x.numel() / c;
    std::vector<Tensor> maps;
    maps.reserve(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) {
      Tensor values = Tensor::empty(DType::kFloat32, {c});
      std::copy_n(x.as<const float>() + i * c, c, values.data_as<float>());
      maps.push_back(Tensor::container(DType::kMap, {keys_.dtype(), DType::kFloat32}, {keys_, values}));
    }
    return {Tensor::container(DType::kSequence, {DType::kMap, keys_.dtype(), DType::kFloat32}, std::move(maps))};
  }

 private:
  Tensor keys_;  // shared by every map (values are never written once built)
};

}  // namespace

TWINFER_REGISTER_SCHEMA("ZipMap", zipmap_infer, kMlDomain);
TWINFER_REGISTER_STRING_KERNEL("ZipMap", 0, nullptr, make_kernel<ZipMapKernel>, kMlDomain);

}  // namespace twinfer::ml
