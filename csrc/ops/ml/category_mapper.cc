// CategoryMapper: strings to int64 and back through two parallel lists,
// cats_strings[i] <-> cats_int64s[i]; what is in neither maps to
// default_int64 (-1) or default_string ("_Unused").
#include <unordered_map>

#include "ops/ml/ml_common.h"

namespace twinfer::ml {
namespace {

void check_lists(const graph::Node& n) {
  const size_t a = n.attr_ints("cats_int64s").size(), b = strings(n, "cats_strings").size();
  if (a != b) bad_model(n, "cats_int64s and cats_strings must be equally long (" + std::to_string(a) + " and " +
                               std::to_string(b) + ")");
}

void mapper_infer(InferContext& c) {
  const DType t = c.input_dtype(0);
  if (!(t == DType::kString || t == DType::kInt64))
    c.fail(ErrorKind::kDType, std::string("X must be string or int64, got ") + dtype_name(t));
  check_lists(c.node());
  const DType out = t == DType::kString ? DType::kInt64 : DType::kString;
  const auto& v = c.input(0);
  if (v.has_shape) c.set_output(0, out, v.shape);
  else c.set_output_rank_unknown(0, out);
}

class CategoryMapperKernel final : public MlKernel {
 public:
  explicit CategoryMapperKernel(const KernelBuildInfo& info) : MlKernel(info) {
    const graph::Node& n = info.node();
    check_lists(n);
    const std::vector<int64_t> ints = n.attr_ints("cats_int64s");
    const std::vector<std::string> strs = strings(n, "cats_strings");
    for (size_t i = 0; i < ints.size(); ++i) {
      to_int_.emplace(strs[i], ints[i]);
      to_string_.emplace(ints[i], strs[i]);
    }
    default_int_ = n.attr_int("default_int64", -1);
    default_string_ = n.attr_string("default_string", "_Unused");
  }

  void run(KernelContext& ctx) const override {
    const TensorView& x = ctx.inputs[0];
    const TensorView& y = ctx.outputs[0];
    for (int64_t i = 0; i < x.numel(); ++i) {
      if (x.dtype == DType::kString) {
        auto it = to_int_.find(x.as<const std::string>()[i]);
        y.as<int64_t>()[i] = it == to_int_.end() ? default_int_ : it->second;
      } else {
        auto it = to_string_.find(x.as<const int64_t>()[i]);
        y.as<std::string>()[i] = it == to_string_.end() ? default_string_ : it->second;
      }
    }
  }

 private:
  std::unordered_map<std::string, int64_t> to_int_;
  std::unordered_map<int64_t, std::string> to_string_;
  int64_t default_int_;
  std::string default_string_;
};

}  // namespace

TWINFER_REGISTER_SCHEMA("CategoryMapper", mapper_infer, kMlDomain);
TWINFER_REGISTER_STRING_KERNEL("CategoryMapper", 0, nullptr, make_kernel<CategoryMapperKernel>, kMlDomain);

}  // namespace twinfer::ml
