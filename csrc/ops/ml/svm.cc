// SVMRegressor and SVMClassifier (libsvm's models as ONNX stores them).
//   kernel_type LINEAR / POLY / RBF / SIGMOID with kernel_params [gamma,
//   coef0, degree]: K(x, v) = x.v, (gamma x.v + coef0)^degree,
//   exp(-gamma |x - v|^2), tanh(gamma x.v + coef0).
//   With support vectors (SVC mode) the decision values combine the kernel
//   values with the dual coefficients; without (liblinear mode) they are
//   x.w + rho per class.
//   The classifier is one-vs-one: each pair (i, j) of classes votes, the
//   label is the class with most votes; with prob_a / prob_b the pairwise
//   decisions become probabilities (Platt scaling) coupled into class
//   probabilities (Wu, Lin and Weng's method, as libsvm); without, the scores
//   are the pairwise decision values. Scores then get post_transform.
// Computed in float, as onnxruntime does; decision sums in double.
#include <algorithm>
#include <cmath>

#include "ops/ml/ml_common.h"

namespace twinfer::ml {
namespace {

enum class KernelType { kLinear, kPoly, kRbf, kSigmoid };

struct SvmKernel {
  KernelType type = KernelType::kLinear;
  float gamma = 0.f, coef0 = 0.f, degree = 0.f;

  static SvmKernel of(const graph::Node& n) {
    SvmKernel k;
    const std::string t = n.attr_string("kernel_type", "LINEAR");
    if (t == "LINEAR") k.type = KernelType::kLinear;
    else if (t == "POLY") k.type = KernelType::kPoly;
    else if (t == "RBF") k.type = KernelType::kRbf;
    else if (t == "SIGMOID") k.type = KernelType::kSigmoid;
    else throw Error(ErrorKind::kInvalidArgument, "kernel_type must be LINEAR, POLY, RBF or SIGMOID, got '" + t + "'",
                     n.name, n.op_type);
    const std::vector<float> p = n.attr_floats("kernel_params");
    if (!p.empty() && p.size() != 3) bad_model(n, "kernel_params must be [gamma, coef0, degree]");
    if (p.size() == 3) {
      k.gamma = p[0];
      k.coef0 = p[1];
      k.degree = p[2];
    }
    return k;
  }

  // K(x, v) for one pair of length-f vectors; `bias` is added to a linear
  // kernel's dot product (liblinear's rho).
  float operator()(const float* x, const float* v, int64_t f, float bias = 0.f) const {
    if (type == KernelType::kRbf) {
      float s = 0.f;
      for (int64_t j = 0; j < f; ++j) s += (x[j] - v[j]) * (x[j] - v[j]);
      return std::exp(-gamma * s);
    }
    float dot = 0.f;
    for (int64_t j = 0; j < f; ++j) dot += x[j] * v[j];
    switch (type) {
      case KernelType::kPoly: return std::pow(gamma * dot + coef0, degree);
      case KernelType::kSigmoid: return std::tanh(gamma * dot + coef0);
      default: return dot + bias;
    }
  }
};

std::vector<float> floats_attr(const graph::Node& n, const char* name) {
  std::vector<float> v;
  for (double d : reals(n, name)) v.push_back(static_cast<float>(d));
  return v;
}

int64_t features_of(const graph::Node& n, const Shape& x) {
  if (x.size() != 1 && x.size() != 2) bad_model(n, "X must be [N, F] or [F], got " + shape_str(x));
  return x.back();
}

// ---- SVMRegressor ------------------------------------------------------------------

void regressor_infer(InferContext& c) {
  require_features(c, 0);
  SvmKernel::of(c.node());
  c.set_output(0, DType::kFloat32, {rows_dim(c, 0), Dim(1)});
}

class SvmRegressorKernel final : public MlKernel {
 public:
  explicit SvmRegressorKernel(const KernelBuildInfo& info) : MlKernel(info), kernel_(SvmKernel::of(info.node())) {
    const graph::Node& n = info.node();
    vectors_ = n.attr_int("n_supports", 0);
    sv_ = floats_attr(n, "support_vectors");
    coef_ = floats_attr(n, "coefficients");
    rho_ = floats_attr(n, "rho");
    one_class_ = n.attr_int("one_class", 0) != 0;
    f_ = features_of(n, info.input_shape(0));
    if (rho_.empty()) bad_model(n, "has no rho");
    if (vectors_ > 0) {
      if (static_cast<int64_t>(sv_.size()) != vectors_ * f_)
        bad_model(n, std::to_string(sv_.size()) + " support vector values for " + std::to_string(vectors_) +
                         " vectors of " + std::to_string(f_) + " features");
      if (static_cast<int64_t>(coef_.size()) != vectors_)
        bad_model(n, "needs one coefficient per support vector");
    } else {
      kernel_.type = KernelType::kLinear;  // liblinear: coefficients are the weights
      if (static_cast<int64_t>(coef_.size()) != f_) bad_model(n, "needs one coefficient per feature");
    }
  }

  void run(KernelContext& ctx) const override {
    const Rows r = rows_of(ctx.inputs[0].shape);
    const std::vector<float> x = as_floats(ctx.inputs[0]);
    float* y = ctx.outputs[0].as<float>();
    for (int64_t i = 0; i < r.n; ++i) {
      const float* xi = x.data() + i * f_;
      float s;
      if (vectors_ > 0) {
        s = rho_[0];
        for (int64_t v = 0; v < vectors_; ++v) s += coef_[v] * kernel_(xi, sv_.data() + v * f_, f_);
      } else {
        s = kernel_(xi, coef_.data(), f_, rho_[0]);
      }
      y[i] = one_class_ ? (s > 0.f ? 1.f : -1.f) : s;
    }
  }

 private:
  SvmKernel kernel_;
  int64_t vectors_ = 0, f_ = 0;
  std::vector<float> sv_, coef_, rho_;
  bool one_class_ = false;
};

// ---- SVMClassifier ------------------------------------------------------------------

// Pairwise probabilities r (k x k, r[i][j] = P(i | i or j)) coupled into class
// probabilities p by the iterative method of Wu, Lin and Weng (2004), second
// approach, as libsvm's multiclass_probability.
void couple(int64_t k, const std::vector<float>& r, float* p) {
  std::vector<float> q(static_cast<size_t>(k * k), 0.f), qp(static_cast<size_t>(k));
  for (int64_t t = 0; t < k; ++t) {
    p[t] = 1.f / static_cast<float>(k);
    for (int64_t j = 0; j < k; ++j) {
      if (j == t) continue;
      q[t * k + t] += r[j * k + t] * r[j * k + t];
      q[t * k + j] = j < t ? q[j * k + t] : -r[j * k + t] * r[t * k + j];
    }
  }
  const float eps = 0.005f / static_cast<float>(k);
  for (int iter = 0; iter < 100; ++iter) {
    float pqp = 0.f;
    for (int64_t t = 0; t < k; ++t) {
      qp[t] = 0.f;
      for (int64_t j = 0; j < k; ++j) qp[t] += q[t * k + j] * p[j];
      pqp += p[t] * qp[t];
    }
    float max_error = 0.f;
    for (int64_t t = 0; t < k; ++t) max_error = std::max(max_error, std::abs(qp[t] - pqp));
    if (max_error < eps) break;
    for (int64_t t = 0; t < k; ++t) {
      const float diff = (-qp[t] + pqp) / q[t * k + t];
      p[t] += diff;
      pqp = (pqp + diff * (diff * q[t * k + t] + 2 * qp[t])) / (1 + diff) / (1 + diff);
      for (int64_t j = 0; j < k; ++j) {
        qp[j] = (qp[j] + diff * q[t * k + j]) / (1 + diff);
        p[j] /= (1 + diff);
      }
    }
  }
}

struct SvcShape {
  int64_t classes = 0, columns = 0;
};

SvcShape svc_shape(const graph::Node& n) {
  const ClassLabels labels = class_labels(n, "classlabels_ints");
  SvcShape s;
  s.classes = static_cast<int64_t>(labels.size());
  const bool svc = !n.attr_ints("vectors_per_class").empty();
  const bool proba = !n.attr_floats("prob_a").empty();
  s.columns = svc && !proba ? (s.classes > 2 ? s.classes * (s.classes - 1) / 2 : 2) : s.classes;
  return s;
}

void classifier_infer(InferContext& c) {
  require_features(c, 0);
  SvmKernel::of(c.node());
  post_transform_attr(c.node());
  const ClassLabels labels = class_labels(c.node(), "classlabels_ints");
  if (!(labels.size() > 0)) c.fail(ErrorKind::kModelFormat, "has no classlabels_ints or classlabels_strings");
  c.set_output(0, labels.dtype(), {rows_dim(c, 0)});
  if (c.has_output(1)) c.set_output(1, DType::kFloat32, {rows_dim(c, 0), Dim(svc_shape(c.node()).columns)});
}

class SvmClassifierKernel final : public MlKernel {
 public:
  explicit SvmClassifierKernel(const KernelBuildInfo& info)
      : MlKernel(info), kernel_(SvmKernel::of(info.node())), labels_(class_labels(info.node(), "classlabels_ints")),
        post_(post_transform_attr(info.node())) {
    const graph::Node& n = info.node();
    per_class_ = n.attr_ints("vectors_per_class");
    sv_ = floats_attr(n, "support_vectors");
    coef_ = floats_attr(n, "coefficients");
    rho_ = floats_attr(n, "rho");
    prob_a_ = floats_attr(n, "prob_a");
    prob_b_ = floats_attr(n, "prob_b");
    k_ = static_cast<int64_t>(labels_.size());
    f_ = features_of(n, info.input_shape(0));
    columns_ = svc_shape(n).columns;
    if (k_ < 1) bad_model(n, "has no class labels");
    if (prob_a_.size() != prob_b_.size()) bad_model(n, "prob_a and prob_b must be equally long");
    for (float c : coef_) all_positive_ = all_positive_ && c >= 0.f;
    const int64_t pairs = k_ * (k_ - 1) / 2;
    if (!per_class_.empty()) {
      if (static_cast<int64_t>(per_class_.size()) != k_) bad_model(n, "needs vectors_per_class for every class");
      for (int64_t c : per_class_) {
        if (c < 0) bad_model(n, "vectors_per_class must not be negative");
        first_.push_back(vectors_);
        vectors_ += c;
      }
      if (static_cast<int64_t>(sv_.size()) != vectors_ * f_)
        bad_model(n, std::to_string(sv_.size()) + " support vector values for " + std::to_string(vectors_) +
                         " vectors of " + std::to_string(f_) + " features");
      if (static_cast<int64_t>(coef_.size()) < (k_ - 1) * vectors_)
        bad_model(n, "needs (classes - 1) x vectors coefficients");
      if (static_cast<int64_t>(rho_.size()) < pairs) bad_model(n, "needs one rho per pair of classes");
      if (!prob_a_.empty() && static_cast<int64_t>(prob_a_.size()) < pairs)
        bad_model(n, "needs prob_a / prob_b per pair of classes");
    } else {
      kernel_.type = KernelType::kLinear;  // liblinear: one weight row per class
      if (static_cast<int64_t>(coef_.size()) != k_ * f_) bad_model(n, "needs classes x features coefficients");
      if (rho_.empty()) bad_model(n, "has no rho");
    }
  }

  void run(KernelContext& ctx) const override {
    const Rows r = rows_of(ctx.inputs[0].shape);
    const std::vector<float> x = as_floats(ctx.inputs[0]);
    const TensorView& y = ctx.outputs[0];
    float* z = ctx.outputs.size() > 1 && ctx.outputs[1].data ? ctx.outputs[1].as<float>() : nullptr;
    std::vector<float> scores, kern(static_cast<size_t>(vectors_));
    std::vector<int64_t> votes(static_cast<size_t>(k_));
    for (int64_t i = 0; i < r.n; ++i) {
      const float* xi = x.data() + i * f_;
      std::vector<float> out(static_cast<size_t>(columns_), 0.f);
      if (vectors_ == 0) {
        scores.assign(static_cast<size_t>(k_), 0.f);
        for (int64_t c = 0; c < k_; ++c) scores[c] = kernel_(xi, coef_.data() + c * f_, f_, rho_[0]);
        const int64_t best = std::max_element(scores.begin(), scores.end()) - scores.begin();
        choose(y, i, scores[best], best, /*have_proba=*/false, k_ * (k_ - 1) / 2);
        write_scores(scores, post_, SecondClass::kNone, out.data());
      } else {
        for (int64_t v = 0; v < vectors_; ++v) kern[v] = kernel_(xi, sv_.data() + v * f_, f_);
        std::fill(votes.begin(), votes.end(), 0);
        scores.clear();
        for (int64_t a = 0; a + 1 < k_; ++a)
          for (int64_t b = a + 1; b < k_; ++b) {
            // Class a's vectors against b's coefficient row and the reverse.
            double s = 0;
            for (int64_t m = 0; m < per_class_[a]; ++m)
              s += coef_[(b - 1) * vectors_ + first_[a] + m] * kern[first_[a] + m];
            for (int64_t m = 0; m < per_class_[b]; ++m) s += coef_[a * vectors_ + first_[b] + m] * kern[first_[b] + m];
            s += rho_[scores.size()];
            scores.push_back(static_cast<float>(s));
            ++votes[s > 0 ? a : b];
          }
        const int64_t best = std::max_element(votes.begin(), votes.end()) - votes.begin();
        if (!prob_a_.empty()) {
          std::vector<float> pairwise(static_cast<size_t>(k_ * k_), 0.f);
          size_t idx = 0;
          for (int64_t a = 0; a + 1 < k_; ++a)
            for (int64_t b = a + 1; b < k_; ++b, ++idx) {
              // Platt: P(a | a or b) = 1 - logistic(s * A + B), kept inside (1e-7, 1 - 1e-7).
              float p = 1.f - logistic(scores[idx] * prob_a_[idx] + prob_b_[idx]);
              p = std::min(std::max(p, 1e-7f), 1.f - 1e-7f);
              pairwise[a * k_ + b] = p;
              pairwise[b * k_ + a] = 1.f - p;
            }
          std::vector<float> probs(static_cast<size_t>(k_));
          couple(k_, pairwise, probs.data());
          choose(y, i, 0.f, best, true, k_ * (k_ - 1) / 2);
          write_scores(probs, post_, SecondClass::kNone, out.data());
        } else {
          choose(y, i, 0.f, best, false, k_ * (k_ - 1) / 2);
          // Two classes give one decision value: [-s, s] (or logistic of both)
          // without a transform, [1 - s, s] with one.
          const SecondClass second = k_ <= 2 ? (post_ == PostTransform::kNone ? SecondClass::kMixed : SecondClass::kComplement)
                                             : SecondClass::kNone;
          write_scores(scores, post_, second, out.data());
        }
      }
      if (z) std::copy(out.begin(), out.end(), z + i * columns_);
    }
  }

 private:
  // The label, onnxruntime's way: with one pair of classes and no
  // probabilities, the decision value's sign picks (weights all positive:
  // >= 0.5), else the winner; without a pair at all, "1"/"0" by sign.
  void choose(const TensorView& y, int64_t i, float max_weight, int64_t best, bool have_proba, int64_t pairs) const {
    if (pairs != 1) {
      labels_.write(y, i, static_cast<size_t>(best));
      return;
    }
    if (labels_.size() == 2) {
      if (!have_proba && ((all_positive_ && max_weight >= 0.5f) || (max_weight > 0 && !all_positive_)))
        labels_.write(y, i, 1);
      else
        labels_.write(y, i, static_cast<size_t>(best));
      return;
    }
    write_label(y, i, max_weight > 0 ? 1 : 0, max_weight > 0 ? "1" : "0");
  }

  SvmKernel kernel_;
  ClassLabels labels_;
  PostTransform post_;
  std::vector<int64_t> per_class_, first_;
  std::vector<float> sv_, coef_, rho_, prob_a_, prob_b_;
  int64_t k_ = 0, f_ = 0, vectors_ = 0, columns_ = 0;
  bool all_positive_ = true;
};

bool svm_supports(const KernelBuildInfo& info, std::string* why) { return features_supported(info, 0, why); }

}  // namespace

TWINFER_REGISTER_SCHEMA("SVMRegressor", regressor_infer, kMlDomain);
TWINFER_REGISTER_KERNEL("SVMRegressor", Backend::kCPU, 0, svm_supports, make_kernel<SvmRegressorKernel>, kMlDomain);
TWINFER_REGISTER_SCHEMA("SVMClassifier", classifier_infer, kMlDomain);
TWINFER_REGISTER_STRING_KERNEL("SVMClassifier", 0, svm_supports, make_kernel<SvmClassifierKernel>, kMlDomain);

}  // namespace twinfer::ml
