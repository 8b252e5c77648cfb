// RandomNormal, RandomUniform (shape from the `shape` attribute) and
// RandomNormalLike, RandomUniformLike (shape, and dtype unless given, from
// the input): float16, float or double samples of N(mean, scale^2) or
// U[low, high). Never folded into constants (graph/passes/infer_and_fold).
#include <cmath>

#include "core/half.h"
#include "ops/kernel.h"
#include "ops/random/random_stream.h"
#include "ops/schema.h"

namespace twinfer::random {
namespace {

bool sampleable(DType t) { return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16; }

// The output dtype: the `dtype` attribute, else (the *Like ops) the input's,
// else float.
DType output_dtype(const graph::Node& n, DType input, bool like) {
  if (!n.has_attr("dtype")) return like ? input : DType::kFloat32;
  return dtype_from_onnx(static_cast<int32_t>(n.attr_int("dtype", 1)));
}

bool is_like(const graph::Node& n) { return n.op_type == "RandomNormalLike" || n.op_type == "RandomUniformLike"; }

void random_infer(InferContext& c) {
  const bool like = is_like(c.node());
  const DType t = output_dtype(c.node(), like ? c.input_dtype(0) : DType::kUndefined, like);
  if (!(sampleable(t)))
    c.fail(ErrorKind::kDType, std::string("the output must be float16, float or double, got ") + dtype_name(t));
  if (like) {
    if (c.input_has_shape(0)) c.set_output(0, t, c.input_shape(0));
    else c.set_output_rank_unknown(0, t);
    return;
  }
  if (!(c.node().has_attr("shape"))) c.fail(ErrorKind::kModelFormat, "has no shape attribute");
  SymShape s;
  for (int64_t d : c.node().attr_ints("shape")) {
    if (!(d >= 0)) c.fail(ErrorKind::kShape, "shape has a negative dim " + std::to_string(d));
    s.push_back(Dim(d));
  }
  c.set_output(0, t, s);
}

class RandomTensorKernel final : public Kernel {
 public:
  explicit RandomTensorKernel(const KernelBuildInfo& info) : stream_(info.node()) {
    const graph::Node& n = info.node();
    normal_ = n.op_type == "RandomNormal" || n.op_type == "RandomNormalLike";
    a_ = normal_ ? n.attr_float("mean", 0.f) : n.attr_float("low", 0.f);
    b_ = normal_ ? n.attr_float("scale", 1.f) : n.attr_float("high", 1.f);
    if (normal_ && !(b_ >= 0))
      throw Error(ErrorKind::kInvalidArgument, "scale must not be negative", n.name, n.op_type);
    if (!normal_ && !(b_ >= a_))
      throw Error(ErrorKind::kInvalidArgument, "high must not be below low", n.name, n.op_type);
  }
  const char* impl_name() const override { return "random"; }

  void run(KernelContext& ctx) const override {
    const TensorView& y = ctx.outputs[0];
    std::mt19937_64 gen = stream_.next();
    if (y.dtype == DType::kFloat64) return fill(y.as<double>(), y.numel(), gen, [](double v) { return v; });
    if (y.dtype == DType::kFloat32) return fill(y.as<float>(), y.numel(), gen, [](double v) { return float(v); });
    fill(y.as<half_t>(), y.numel(), gen, [](double v) { return half_t{float_to_half(static_cast<float>(v))}; });
  }

 private:
  template <typename T, typename F>
  void fill(T* out, int64_t n, std::mt19937_64& gen, F convert) const {
    if (normal_) {
      std::normal_distribution<double> d(a_, b_);
      for (int64_t i = 0; i < n; ++i) out[i] = convert(d(gen));
    } else {
      std::uniform_real_distribution<double> d(a_, b_);
      for (int64_t i = 0; i < n; ++i) out[i] = convert(d(gen));
    }
  }

  RandomStream stream_;
  bool normal_ = true;
  double a_ = 0, b_ = 1;  // mean, scale or low, high
};

}  // namespace

TWINFER_REGISTER_SCHEMA("RandomNormal", random_infer);
TWINFER_REGISTER_KERNEL("RandomNormal", Backend::kCPU, 0, nullptr, make_kernel<RandomTensorKernel>);
TWINFER_REGISTER_SCHEMA("RandomUniform", random_infer);
TWINFER_REGISTER_KERNEL("RandomUniform", Backend::kCPU, 0, nullptr, make_kernel<RandomTensorKernel>);
TWINFER_REGISTER_SCHEMA("RandomNormalLike", random_infer);
TWINFER_REGISTER_KERNEL("RandomNormalLike", Backend::kCPU, 0, nullptr, make_kernel<RandomTensorKernel>);
TWINFER_REGISTER_SCHEMA("RandomUniformLike", random_infer);
TWINFER_REGISTER_KERNEL("RandomUniformLike", Backend::kCPU, 0, nullptr, make_kernel<RandomTensorKernel>);

}  // namespace twinfer::random
