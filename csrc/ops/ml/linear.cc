// LinearRegressor and LinearClassifier: scores = X W^T + intercepts, in
// float (X is converted, as onnxruntime does).
//   Regressor: [N, targets] scores; post_transform on rows of two or more
//   (PROBIT alone on one).
//   Classifier: label = the class of the highest raw score; with a single
//   score column, the positive class when it is > 0 (classlabels' second or
//   1 / "1", else their first or 0 / "0"). Scores get post_transform; a
//   single column with two class labels becomes [1 - s, s], or under
//   LOGISTIC [1 - logistic(s), logistic(s)] (onnxruntime's rule; the ONNX
//   reference evaluator's too).
#include "ops/ml/ml_common.h"

namespace twinfer::ml {
namespace {

// Scores X W^T + b for rows of X (float), W [k, f] row-major.
void affine(const std::vector<float>& x, const Rows& r, const std::vector<float>& w, const std::vector<float>& b,
            int64_t k, float* out) {
  for (int64_t i = 0; i < r.n; ++i)
    for (int64_t t = 0; t < k; ++t) {
      float s = b.empty() ? 0.f : b[t];
      const float* xi = x.data() + i * r.f;
      const float* wt = w.data() + t * r.f;
      for (int64_t j = 0; j < r.f; ++j) s += xi[j] * wt[j];
      out[i * k + t] = s;
    }
}

std::vector<float> floats_of(const graph::Node& n, const char* name, bool required) {
  std::vector<float> v;
  for (double d : reals(n, name)) v.push_back(static_cast<float>(d));
  if (required && v.empty()) bad_model(n, std::string("has no ") + name);
  return v;
}

// The number of features W implies for k outputs; fails on a mismatch with X.
int64_t check_width(const graph::Node& n, size_t weights, int64_t k, const Shape& x) {
  const int64_t f = x.size() == 1 ? x[0] : x.size() == 2 ? x[1] : -1;
  if (f < 0) bad_model(n, "X must be [N, F] or [F], got " + shape_str(x));
  if (k <= 0 || static_cast<int64_t>(weights) != k * f)
    bad_model(n, "coefficients hold " + std::to_string(weights) + " values; " + std::to_string(k) + " outputs of " +
                     std::to_string(f) + " features need " + std::to_string(k * f));
  return f;
}

// ---- LinearRegressor ------------------------------------------------------------

void regressor_infer(InferContext& c) {
  require_features(c, 0);
  post_transform_attr(c.node());
  c.set_output(0, DType::kFloat32, {rows_dim(c, 0), Dim(c.node().attr_int("targets", 1))});
}

class LinearRegressorKernel final : public MlKernel {
 public:
  explicit LinearRegressorKernel(const KernelBuildInfo& info)
      : MlKernel(info), targets_(info.node().attr_int("targets", 1)), post_(post_transform_attr(info.node())) {
    const graph::Node& n = info.node();
    w_ = floats_of(n, "coefficients", true);
    b_ = floats_of(n, "intercepts", false);
    check_width(n, w_.size(), targets_, info.input_shape(0));
    if (!b_.empty() && static_cast<int64_t>(b_.size()) != targets_)
      bad_model(n, "has " + std::to_string(b_.size()) + " intercepts for " + std::to_string(targets_) + " targets");
  }

  void run(KernelContext& ctx) const override {
    const Rows r = rows_of(ctx.inputs[0].shape);
    float* y = ctx.outputs[0].as<float>();
    affine(as_floats(ctx.inputs[0]), r, w_, b_, targets_, y);
    if (post_ == PostTransform::kNone) return;
    std::vector<float> row(static_cast<size_t>(targets_));
    for (int64_t i = 0; i < r.n; ++i) {
      std::copy_n(y + i * targets_, targets_, row.begin());
      write_scores(row, post_, SecondClass::kNone, y + i * targets_);
    }
  }

 private:
  int64_t targets_;
  PostTransform post_;
  std::vector<float> w_, b_;
};

// ---- LinearClassifier -------------------------------------------------------------

int64_t score_columns(const graph::Node& n, const ClassLabels& labels, int64_t k) {
  return k == 1 && labels.size() == 2 ? 2 : k;
}

// Output count k: the intercepts', else what coefficients / features give.
int64_t classifier_outputs(const graph::Node& n, const Shape* x) {
  const std::vector<double> b = reals(n, "intercepts");
  if (!b.empty()) return static_cast<int64_t>(b.size());
  const size_t w = reals(n, "coefficients").size();
  if (!x || x->empty() || x->back() <= 0) return -1;
  return static_cast<int64_t>(w) / x->back();
}

void classifier_infer(InferContext& c) {
  require_features(c, 0);
  post_transform_attr(c.node());
  const ClassLabels labels = class_labels(c.node(), "classlabels_ints");
  if (!(labels.size() > 0)) c.fail(ErrorKind::kModelFormat, "has no classlabels_ints or classlabels_strings");
  Shape x;
  const bool known = c.input_known(0);
  if (known) x = c.input_values_shape(0);
  const int64_t k = classifier_outputs(c.node(), known ? &x : nullptr);
  c.set_output(0, labels.dtype(), {rows_dim(c, 0)});
  if (c.has_output(1))
    c.set_output(1, DType::kFloat32, {rows_dim(c, 0), k > 0 ? Dim(score_columns(c.node(), labels, k)) : Dim()});
}

class LinearClassifierKernel final : public MlKernel {
 public:
  explicit LinearClassifierKernel(const KernelBuildInfo& info)
      : MlKernel(info), labels_(class_labels(info.node(), "classlabels_ints")), post_(post_transform_attr(info.node())) {
    const graph::Node& n = info.node();
    const Shape x = info.input_shape(0);
    w_ = floats_of(n, "coefficients", true);
    b_ = floats_of(n, "intercepts", false);
    k_ = classifier_outputs(n, &x);
    check_width(n, w_.size(), k_, x);
    if (k_ > 1 && static_cast<int64_t>(labels_.size()) != k_)
      bad_model(n, std::to_string(k_) + " score columns but " + std::to_string(labels_.size()) + " class labels");
  }

  void run(KernelContext& ctx) const override {
    const Rows r = rows_of(ctx.inputs[0].shape);
    std::vector<float> s(static_cast<size_t>(r.n * k_));
    affine(as_floats(ctx.inputs[0]), r, w_, b_, k_, s.data());
    const TensorView& y = ctx.outputs[0];
    const bool has_z = ctx.outputs.size() > 1 && ctx.outputs[1].data;
    const bool two = k_ == 1 && labels_.size() == 2;
    const int64_t cols = two ? 2 : k_;
    std::vector<float> row;
    for (int64_t i = 0; i < r.n; ++i) {
      const float* si = s.data() + i * k_;
      if (k_ == 1) {
        const bool positive = si[0] > 0;
        if (two) labels_.write(y, i, positive ? 1 : 0);
        else write_label(y, i, positive ? 1 : 0, positive ? "1" : "0");
      } else {
        labels_.write(y, i, static_cast<size_t>(std::max_element(si, si + k_) - si));
      }
      if (!has_z) continue;
      row.assign(si, si + k_);
      write_scores(row, post_, two ? SecondClass::kComplement : SecondClass::kNone,
                   ctx.outputs[1].as<float>() + i * cols);
    }
  }

 private:
  ClassLabels labels_;
  PostTransform post_;
  std::vector<float> w_, b_;
  int64_t k_ = 0;
};

bool linear_supports(const KernelBuildInfo& info, std::string* why) { return features_supported(info, 0, why); }

}  // namespace

TWINFER_REGISTER_SCHEMA("LinearRegressor", regressor_infer, kMlDomain);
TWINFER_REGISTER_KERNEL("LinearRegressor", Backend::kCPU, 0, linear_supports, make_kernel<LinearRegressorKernel>,
                        kMlDomain);
TWINFER_REGISTER_SCHEMA("LinearClassifier", classifier_infer, kMlDomain);
TWINFER_REGISTER_STRING_KERNEL("LinearClassifier", 0, linear_supports, make_kernel<LinearClassifierKernel>, kMlDomain);

}  // namespace twinfer::ml
