#include "ops/ml/ml_common.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace twinfer::ml {

void bad_model(const graph::Node& n, const std::string& msg) {
  throw Error(ErrorKind::kModelFormat, msg, n.name, n.op_type);
}

std::vector<double> reals(const graph::Node& n, const std::string& name) {
  if (const graph::Attribute* a = n.attr(name)) {
    if (a->type != graph::Attribute::Type::kFloats && a->type != graph::Attribute::Type::kFloat)
      bad_model(n, "attribute '" + name + "' must be floats");
    if (a->type == graph::Attribute::Type::kFloat) return {a->f};
    return std::vector<double>(a->floats.begin(), a->floats.end());
  }
  const Tensor* t = tensor_attr(n, name + "_as_tensor");
  if (!t) return {};
  std::vector<double> v(static_cast<size_t>(t->numel()));
  if (t->dtype() == DType::kFloat64) std::copy_n(t->data_as<const double>(), v.size(), v.begin());
  else if (t->dtype() == DType::kFloat32) std::copy_n(t->data_as<const float>(), v.size(), v.begin());
  else bad_model(n, "attribute '" + name + "_as_tensor' must be a float or double tensor");
  return v;
}

std::vector<std::string> strings(const graph::Node& n, const std::string& name) {
  const graph::Attribute* a = n.attr(name);
  if (!a) return {};
  if (a->type == graph::Attribute::Type::kString) return {a->s};
  if (a->type != graph::Attribute::Type::kStrings) bad_model(n, "attribute '" + name + "' must be strings");
  return a->strings;
}

const Tensor* tensor_attr(const graph::Node& n, const std::string& name) {
  const graph::Attribute* a = n.attr(name);
  if (!a) return nullptr;
  if (a->type != graph::Attribute::Type::kTensor) bad_model(n, "attribute '" + name + "' must be a tensor");
  return &a->t;
}

bool is_feature_dtype(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kInt32 || t == DType::kInt64;
}

void require_features(const InferContext& c, size_t i) {
  if (!(is_feature_dtype(c.input_dtype(i))))
    c.fail(ErrorKind::kDType,
           std::string("X must be float, double, int32 or int64, got ") + dtype_name(c.input_dtype(i)));
  if (c.input_has_shape(i)) {
    const size_t r = c.input_shape(i).size();
    if (!(r == 1 || r == 2)) c.fail(ErrorKind::kShape, "X must be [N, F] or [F], got rank " + std::to_string(r));
  }
}

bool features_supported(const KernelBuildInfo& info, size_t i, std::string* why) {
  if (is_feature_dtype(info.input_dtype(i))) return true;
  if (why) *why = info.node().op_type + " takes float, double, int32 or int64 features, not " +
                  dtype_name(info.input_dtype(i));
  return false;
}

Dim rows_dim(const InferContext& c, size_t i) {
  if (!c.input_has_shape(i)) return Dim();
  const SymShape& s = c.input_shape(i);
  return s.size() == 1 ? Dim(1) : s[0];
}

Rows rows_of(const Shape& x) {
  if (x.size() == 1) return {1, x[0]};
  if (x.size() == 2) return {x[0], x[1]};
  return {x.empty() ? 1 : x[0], x.empty() ? 1 : shape_numel(x) / std::max<int64_t>(1, x[0])};
}

template <typename To>
static std::vector<To> convert(const TensorView& x) {
  std::vector<To> out(static_cast<size_t>(x.numel()));
  switch (x.dtype) {
    case DType::kFloat32: std::copy_n(x.as<const float>(), out.size(), out.begin()); break;
    case DType::kFloat64: std::transform(x.as<const double>(), x.as<const double>() + out.size(), out.begin(),
                                         [](double v) { return static_cast<To>(v); }); break;
    case DType::kInt32: std::copy_n(x.as<const int32_t>(), out.size(), out.begin()); break;
    case DType::kInt64: std::transform(x.as<const int64_t>(), x.as<const int64_t>() + out.size(), out.begin(),
                                       [](int64_t v) { return static_cast<To>(v); }); break;
    default: throw Error(ErrorKind::kDType, std::string("features of type ") + dtype_name(x.dtype));
  }
  return out;
}

std::vector<float> as_floats(const TensorView& x) { return convert<float>(x); }
std::vector<double> as_doubles(const TensorView& x) { return convert<double>(x); }

PostTransform post_transform_of(const std::string& name, const graph::Node& n) {
  if (name == "NONE") return PostTransform::kNone;
  if (name == "SOFTMAX") return PostTransform::kSoftmax;
  if (name == "LOGISTIC") return PostTransform::kLogistic;
  if (name == "SOFTMAX_ZERO") return PostTransform::kSoftmaxZero;
  if (name == "PROBIT") return PostTransform::kProbit;
  throw Error(ErrorKind::kInvalidArgument,
              "post_transform must be NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO or PROBIT, got '" + name + "'", n.name,
              n.op_type);
}

PostTransform post_transform_attr(const graph::Node& n) {
  return post_transform_of(n.attr_string("post_transform", "NONE"), n);
}

float logistic(float v) {
  // Evaluated on |v| so exp never overflows.
  const float e = 1.f / (1.f + std::exp(-std::abs(v)));
  return v < 0 ? 1.f - e : e;
}

// The inverse of erf by Winitzki's approximation (a = 0.147), as the ONNX
// reference and onnxruntime compute PROBIT: relative error below 2e-3.
static float erf_inv(float x) {
  const float sgn = x < 0 ? -1.f : 1.f;
  x = (1 - x) * (1 + x);
  const float lg = std::log(x);
  const float v = 2 / (3.14159265f * 0.147f) + 0.5f * lg;
  const float v2 = 1 / 0.147f * lg;
  return sgn * std::sqrt(-v + std::sqrt(v * v - v2));
}

float probit(float v) { return 1.41421356f * erf_inv(2 * v - 1); }

void softmax(float* v, int64_t n) {
  float mx = -std::numeric_limits<float>::max();
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, v[i]);
  float sum = 0.f;
  for (int64_t i = 0; i < n; ++i) sum += (v[i] = std::exp(v[i] - mx));
  for (int64_t i = 0; i < n; ++i) v[i] /= sum;
}

void softmax_zero(float* v, int64_t n) {
  float mx = -std::numeric_limits<float>::max();
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, v[i]);
  const float scale = std::exp(-mx);
  float sum = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    if (v[i] > 1e-7f || v[i] < -1e-7f) sum += (v[i] = std::exp(v[i] - mx));
    else v[i] *= scale;  // a zero stays zero
  }
  for (int64_t i = 0; i < n; ++i) v[i] /= sum;
}

void write_scores(std::vector<float>& s, PostTransform t, SecondClass second, float* out) {
  const int64_t k = static_cast<int64_t>(s.size());
  if (k >= 2) {
    switch (t) {
      case PostTransform::kProbit: for (float& v : s) v = probit(v); break;
      case PostTransform::kLogistic: for (float& v : s) v = logistic(v); break;
      case PostTransform::kSoftmax: softmax(s.data(), k); break;
      case PostTransform::kSoftmaxZero: softmax_zero(s.data(), k); break;
      case PostTransform::kNone: break;
    }
    std::copy(s.begin(), s.end(), out);
    return;
  }
  if (k == 0) return;
  const float v = s[0];
  if (t == PostTransform::kProbit) {
    out[0] = probit(v);
  } else if (second == SecondClass::kComplement) {
    // The transform applies to the score, the complement after it (it was
    // skipped: LOGISTIC scores of [-0.75, 1.75] where [0.148, 0.852] are meant).
    const float p = t == PostTransform::kLogistic ? logistic(v) : v;
    out[0] = 1.f - p;
    out[1] = p;
  } else if (second == SecondClass::kMixed) {
    out[0] = t == PostTransform::kLogistic ? logistic(-v) : -v;
    out[1] = t == PostTransform::kLogistic ? logistic(v) : v;
  } else {
    out[0] = v;
  }
}

void ClassLabels::write(const TensorView& y, int64_t i, size_t k) const {
  if (use_strings()) y.as<std::string>()[i] = strings[k];
  else y.as<int64_t>()[i] = ints[k];
}

ClassLabels class_labels(const graph::Node& n, const char* ints_name) {
  ClassLabels l;
  l.strings = strings(n, "classlabels_strings");
  l.ints = n.attr_ints(ints_name);
  if (!l.strings.empty() && !l.ints.empty())
    bad_model(n, std::string("has both classlabels_strings and ") + ints_name);
  return l;
}

void write_label(const TensorView& y, int64_t i, int64_t v, const std::string& s) {
  if (y.dtype == DType::kString) y.as<std::string>()[i] = s;
  else y.as<int64_t>()[i] = v;
}

}  // namespace twinfer::ml
