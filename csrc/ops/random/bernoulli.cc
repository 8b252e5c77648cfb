// Bernoulli: 1 with probability x, else 0, for each element of x (float16,
// float or double in [0, 1]); the output's dtype is `dtype` (any numeric
// type or bool), x's when absent. A probability outside [0, 1] (or NaN) is
// an error naming the node.
#include "core/half.h"
#include "ops/elementwise/scalar.h"
#include "ops/elementwise/typeset.h"
#include "ops/kernel.h"
#include "ops/random/random_stream.h"
#include "ops/schema.h"

namespace twinfer::random {
namespace {

bool probability_type(DType t) { return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16; }

DType bernoulli_dtype(const graph::Node& n, DType input) {
  return n.has_attr("dtype") ? dtype_from_onnx(static_cast<int32_t>(n.attr_int("dtype", 1))) : input;
}

void bernoulli_infer(InferContext& c) {
  if (!(probability_type(c.input_dtype(0))))
    c.fail(ErrorKind::kDType,
           std::string("input must be float16, float or double, got ") + dtype_name(c.input_dtype(0)));
  const DType t = bernoulli_dtype(c.node(), c.input_dtype(0));
  if (!(ew::in_typeset(ew::kAllTypes, t)))
    c.fail(ErrorKind::kDType, std::string("dtype ") + dtype_name(t) + " is not supported");
  if (c.input_has_shape(0)) c.set_output(0, t, c.input_shape(0));
  else c.set_output_rank_unknown(0, t);
}

class BernoulliKernel final : public Kernel {
 public:
  explicit BernoulliKernel(const KernelBuildInfo& info)
      : stream_(info.node()), node_(info.node().name), op_(info.node().op_type) {}
  const char* impl_name() const override { return "random"; }

  void run(KernelContext& ctx) const override {
    const TensorView& x = ctx.inputs[0];
    const TensorView& y = ctx.outputs[0];
    std::mt19937_64 gen = stream_.next();
    std::uniform_real_distribution<double> u(0.0, 1.0);
    ew::dispatch_typeset<ew::kAllTypes>(y.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* out = y.as<T>();
      for (int64_t i = 0; i < x.numel(); ++i) {
        const double p = probability(x, i);
        if (!(p >= 0.0 && p <= 1.0))
          throw Error(ErrorKind::kInvalidArgument,
                      "probability " + std::to_string(p) + " at element " + std::to_string(i) + " is not in [0, 1]",
                      node_, op_);
        out[i] = ew::store<T>(u(gen) < p ? 1.0f : 0.0f);
      }
    });
  }

 private:
  static double probability(const TensorView& x, int64_t i) {
    if (x.dtype == DType::kFloat64) return x.as<const double>()[i];
    if (x.dtype == DType::kFloat32) return x.as<const float>()[i];
    return half_to_float(x.as<const half_t>()[i].bits);
  }

  RandomStream stream_;
  std::string node_, op_;
};

}  // namespace

TWINFER_REGISTER_SCHEMA("Bernoulli", bernoulli_infer);
TWINFER_REGISTER_KERNEL("Bernoulli", Backend::kCPU, 0, nullptr, make_kernel<BernoulliKernel>);

}  // namespace twinfer::random
