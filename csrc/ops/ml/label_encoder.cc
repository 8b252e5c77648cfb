// LabelEncoder: maps each element of X through a key -> value table,
// elements not in it to a default. Every form of the op:
//   ai.onnx.ml 1: classes_strings (string -> its index, or index -> string),
//                 default_int64 / default_string;
//   ai.onnx.ml 2: keys_{strings,int64s,floats} -> values_{strings,int64s,floats},
//                 default_{string,int64,float};
//   ai.onnx.ml 4: keys_tensor / values_tensor / default_tensor (int64, int16,
//                 float, double or string).
// A NaN key matches NaN elements. Defaults when none is given: "_Unused",
// -1, -0.0 (the spec's).
#include <cmath>
#include <limits>
#include <unordered_map>

#include "ops/ml/ml_common.h"

namespace twinfer::ml {
namespace {

// One list of keys or values: numbers (as int64 or double) or strings.
struct Column {
  DType dtype = DType::kUndefined;
  std::vector<int64_t> ints;
  std::vector<double> reals;
  std::vector<std::string> strs;
  size_t size() const { return dtype == DType::kString ? strs.size() : dtype_is_float(dtype) ? reals.size() : ints.size(); }
};

bool encodable(DType t) {
  return t == DType::kString || t == DType::kInt64 || t == DType::kInt16 || t == DType::kFloat32 ||
         t == DType::kFloat64;
}

Column from_tensor(const graph::Node& n, const Tensor& t, const char* what) {
  Column c;
  c.dtype = t.dtype();
  const int64_t k = t.numel();
  switch (t.dtype()) {
    case DType::kString: c.strs.assign(t.data_as<const std::string>(), t.data_as<const std::string>() + k); break;
    case DType::kInt64: c.ints.assign(t.data_as<const int64_t>(), t.data_as<const int64_t>() + k); break;
    case DType::kInt16: c.ints.assign(t.data_as<const int16_t>(), t.data_as<const int16_t>() + k); break;
    case DType::kFloat32: c.reals.assign(t.data_as<const float>(), t.data_as<const float>() + k); break;
    case DType::kFloat64: c.reals.assign(t.data_as<const double>(), t.data_as<const double>() + k); break;
    default: bad_model(n, std::string(what) + " must hold strings, int64, int16, float or double, not " +
                          dtype_name(t.dtype()));
  }
  return c;
}

// keys_* or values_* (`prefix`), in whichever form the node gives.
Column column(const graph::Node& n, const std::string& prefix) {
  std::vector<std::pair<std::string, Column>> found;
  if (const Tensor* t = tensor_attr(n, prefix + "_tensor")) found.emplace_back(prefix + "_tensor", from_tensor(n, *t, "a tensor"));
  if (n.has_attr(prefix + "_strings")) {
    Column c;
    c.dtype = DType::kString;
    c.strs = strings(n, prefix + "_strings");
    found.emplace_back(prefix + "_strings", std::move(c));
  }
  if (n.has_attr(prefix + "_int64s")) {
    Column c;
    c.dtype = DType::kInt64;
    c.ints = n.attr_ints(prefix + "_int64s");
    found.emplace_back(prefix + "_int64s", std::move(c));
  }
  if (n.has_attr(prefix + "_floats")) {
    Column c;
    c.dtype = DType::kFloat32;
    for (float v : n.attr_floats(prefix + "_floats")) c.reals.push_back(v);
    found.emplace_back(prefix + "_floats", std::move(c));
  }
  if (found.empty()) bad_model(n, "has no " + prefix + "_* attribute");
  if (found.size() > 1) bad_model(n, "has both " + found[0].first + " and " + found[1].first);
  return std::move(found[0].second);
}

struct Table {
  Column keys, values;
  Column fallback;  // one value
};

Table table_of(const graph::Node& n, DType input) {
  Table t;
  if (n.has_attr("classes_strings")) {  // ai.onnx.ml 1
    Column names;
    names.dtype = DType::kString;
    names.strs = strings(n, "classes_strings");
    Column index;
    index.dtype = DType::kInt64;
    for (size_t i = 0; i < names.strs.size(); ++i) index.ints.push_back(static_cast<int64_t>(i));
    const bool from_strings = input == DType::kString;
    t.keys = from_strings ? names : index;
    t.values = from_strings ? index : names;
  } else {
    t.keys = column(n, "keys");
    t.values = column(n, "values");
    if (t.keys.size() != t.values.size())
      bad_model(n, "has " + std::to_string(t.keys.size()) + " keys but " + std::to_string(t.values.size()) + " values");
  }
  t.fallback.dtype = t.values.dtype;
  if (const Tensor* d = tensor_attr(n, "default_tensor")) {
    t.fallback = from_tensor(n, *d, "default_tensor");
    if (t.fallback.size() != 1 || t.fallback.dtype != t.values.dtype)
      bad_model(n, std::string("default_tensor must be one ") + dtype_name(t.values.dtype) + " value");
  } else if (t.values.dtype == DType::kString) {
    t.fallback.strs = {n.attr_string("default_string", "_Unused")};
  } else if (dtype_is_float(t.values.dtype)) {
    t.fallback.reals = {n.attr_float("default_float", -0.f)};
  } else {
    t.fallback.ints = {n.attr_int("default_int64", -1)};
  }
  // Keys are looked up in X's type: int16 X with int64 keys and so on are refused.
  const bool same_kind = (input == DType::kString) == (t.keys.dtype == DType::kString) &&
                         dtype_is_float(input) == dtype_is_float(t.keys.dtype);
  if (!same_kind)
    bad_model(n, std::string("X is ") + dtype_name(input) + " but the keys are " + dtype_name(t.keys.dtype));
  return t;
}

void label_encoder_infer(InferContext& c) {
  const DType in = c.input_dtype(0);
  if (!(encodable(in)))
    c.fail(ErrorKind::kDType, std::string("X must be string, int64, int16, float or double, got ") + dtype_name(in));
  const Table t = table_of(c.node(), in);
  const auto& v = c.input(0);
  if (v.has_shape) c.set_output(0, t.values.dtype, v.shape);
  else c.set_output_rank_unknown(0, t.values.dtype);
}

class LabelEncoderKernel final : public MlKernel {
 public:
  explicit LabelEncoderKernel(const KernelBuildInfo& info)
      : MlKernel(info), table_(table_of(info.node(), info.input_dtype(0))) {
    const Column& k = table_.keys;
    for (size_t i = 0; i < k.size(); ++i) {
      if (k.dtype == DType::kString) strings_.emplace(k.strs[i], i);
      else if (dtype_is_float(k.dtype) && std::isnan(k.reals[i])) nan_ = static_cast<int64_t>(i);
      else if (dtype_is_float(k.dtype)) reals_.emplace(k.reals[i], i);
      else ints_.emplace(k.ints[i], i);
    }
  }

  void run(KernelContext& ctx) const override {
    const TensorView& x = ctx.inputs[0];
    const TensorView& y = ctx.outputs[0];
    for (int64_t i = 0; i < x.numel(); ++i) put(y, i, find(x, i));
  }

 private:
  // The key index of X's element i, or -1.
  int64_t find(const TensorView& x, int64_t i) const {
    auto hit = [](const auto& map, const auto& key) -> int64_t {
      auto it = map.find(key);
      return it == map.end() ? -1 : static_cast<int64_t>(it->second);
    };
    switch (x.dtype) {
      case DType::kString: return hit(strings_, x.as<const std::string>()[i]);
      case DType::kInt64: return hit(ints_, x.as<const int64_t>()[i]);
      case DType::kInt16: return hit(ints_, static_cast<int64_t>(x.as<const int16_t>()[i]));
      case DType::kFloat32:
      case DType::kFloat64: {
        const double v = x.dtype == DType::kFloat32 ? x.as<const float>()[i] : x.as<const double>()[i];
        return std::isnan(v) ? nan_ : hit(reals_, v);
      }
      default: fail(ErrorKind::kDType, std::string("X of type ") + dtype_name(x.dtype));
    }
  }

  void put(const TensorView& y, int64_t i, int64_t k) const {
    const Column& c = k < 0 ? table_.fallback : table_.values;
    const size_t j = k < 0 ? 0 : static_cast<size_t>(k);
    switch (y.dtype) {
      case DType::kString: y.as<std::string>()[i] = c.strs[j]; break;
      case DType::kInt64: y.as<int64_t>()[i] = c.ints[j]; break;
      case DType::kInt16: y.as<int16_t>()[i] = static_cast<int16_t>(c.ints[j]); break;
      case DType::kFloat32: y.as<float>()[i] = static_cast<float>(c.reals[j]); break;
      case DType::kFloat64: y.as<double>()[i] = c.reals[j]; break;
      default: fail(ErrorKind::kDType, std::string("Y of type ") + dtype_name(y.dtype));
    }
  }

  Table table_;
  std::unordered_map<std::string, size_t> strings_;
  std::unordered_map<int64_t, size_t> ints_;
  std::unordered_map<double, size_t> reals_;  // 0.0 and -0.0 hash alike
  int64_t nan_ = -1;                          // the NaN key's index, if any
};

bool label_encoder_supports(const KernelBuildInfo& info, std::string* why) {
  if (encodable(info.input_dtype(0))) return true;
  if (why) *why = std::string("LabelEncoder does not take ") + dtype_name(info.input_dtype(0));
  return false;
}

}  // namespace

TWINFER_REGISTER_SCHEMA("LabelEncoder", label_encoder_infer, kMlDomain);
TWINFER_REGISTER_STRING_KERNEL("LabelEncoder", 0, label_encoder_supports, make_kernel<LabelEncoderKernel>, kMlDomain);

}  // namespace twinfer::ml
