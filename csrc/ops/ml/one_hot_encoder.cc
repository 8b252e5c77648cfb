// OneHotEncoder: each element of X (int64, int32, float, double — numbers
// are truncated to int64 — or string) as a row of len(cats) floats, 1 where
// the category matches; X's shape gains a last dim. An element in no
// category gives zeros, or an error when zeros = 0.
#include <unordered_map>

#include "ops/ml/ml_common.h"

namespace twinfer::ml {
namespace {

bool encodable(DType t) { return is_feature_dtype(t) || t == DType::kString; }

int64_t category_count(const graph::Node& n) {
  const size_t ints = n.attr_ints("cats_int64s").size(), strs = strings(n, "cats_strings").size();
  if ((ints == 0) == (strs == 0)) bad_model(n, "needs exactly one of cats_int64s and cats_strings");
  return static_cast<int64_t>(ints + strs);
}

void one_hot_infer(InferContext& c) {
  const DType t = c.input_dtype(0);
  if (!(encodable(t))) c.fail(ErrorKind::kDType, std::string("X must be numeric or string, got ") + dtype_name(t));
  const int64_t k = category_count(c.node());
  if (!((t == DType::kString) == !c.node().has_attr("cats_int64s")))
    c.fail(ErrorKind::kModelFormat,
           t == DType::kString ? "string X needs cats_strings" : "numeric X needs cats_int64s");
  if (!c.input_has_shape(0)) return c.set_output_rank_unknown(0, DType::kFloat32);
  SymShape s = c.input_shape(0);
  s.push_back(Dim(k));
  c.set_output(0, DType::kFloat32, s);
}

class OneHotEncoderKernel final : public MlKernel {
 public:
  explicit OneHotEncoderKernel(const KernelBuildInfo& info) : MlKernel(info) {
    const graph::Node& n = info.node();
    k_ = category_count(n);
    zeros_ = n.attr_int("zeros", 1) != 0;
    const std::vector<int64_t> ints = n.attr_ints("cats_int64s");
    for (size_t i = 0; i < ints.size(); ++i) ints_.emplace(ints[i], i);
    const std::vector<std::string> strs = strings(n, "cats_strings");
    for (size_t i = 0; i < strs.size(); ++i) strings_.emplace(strs[i], i);
  }

  void run(KernelContext& ctx) const override {
    const TensorView& x = ctx.inputs[0];
    float* y = ctx.outputs[0].as<float>();
    std::fill(y, y + x.numel() * k_, 0.f);
    for (int64_t i = 0; i < x.numel(); ++i) {
      int64_t hit = -1;
      if (x.dtype == DType::kString) {
        auto it = strings_.find(x.as<const std::string>()[i]);
        if (it != strings_.end()) hit = static_cast<int64_t>(it->second);
      } else {
        auto it = ints_.find(key(x, i));
        if (it != ints_.end()) hit = static_cast<int64_t>(it->second);
      }
      if (hit >= 0) y[i * k_ + hit] = 1.f;
      else if (!zeros_) fail(ErrorKind::kInvalidArgument, "element " + std::to_string(i) + " is in no category (zeros=0)");
    }
  }

 private:
  static int64_t key(const TensorView& x, int64_t i) {
    switch (x.dtype) {
      case DType::kInt64: return x.as<const int64_t>()[i];
      case DType::kInt32: return x.as<const int32_t>()[i];
      case DType::kFloat32: return static_cast<int64_t>(x.as<const float>()[i]);
      default: return static_cast<int64_t>(x.as<const double>()[i]);
    }
  }

  int64_t k_ = 0;
  bool zeros_ = true;
  std::unordered_map<int64_t, size_t> ints_;
  std::unordered_map<std::string, size_t> strings_;
};

bool one_hot_supports(const KernelBuildInfo& info, std::string* why) {
  if (encodable(info.input_dtype(0))) return true;
  if (why) *why = std::string("OneHotEncoder does not take ") + dtype_name(info.input_dtype(0));
  return false;
}

}  // namespace

TWINFER_REGISTER_SCHEMA("OneHotEncoder", one_hot_infer, kMlDomain);
TWINFER_REGISTER_STRING_KERNEL("OneHotEncoder", 0, one_hot_supports, make_kernel<OneHotEncoderKernel>, kMlDomain);

}  // namespace twinfer::ml
