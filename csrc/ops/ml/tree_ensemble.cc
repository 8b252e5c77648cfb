// TreeEnsemble (ai.onnx.ml 5), TreeEnsembleRegressor and
// TreeEnsembleClassifier (ai.onnx.ml 1/3): a row goes down every tree to a
// leaf, the leaves' weights are aggregated per target (SUM, AVERAGE, MIN,
// MAX), base_values are added and post_transform applied, in onnxruntime's
// order. The classifier's label is the class of the highest score, with
// onnxruntime's rules for two classes (see classify). Trees come from
// tree_model.h and are walked by tree_walk.h, 64 rows at a time, in the
// features' own type where that is exact (float features, float thresholds),
// else in double.
#include <algorithm>
#include <limits>
#include <memory>

#include "core/half.h"
#include "core/parallel.h"
#include "ops/ml/ml_common.h"
#include "ops/ml/tree_model.h"
#include "ops/ml/tree_walk.h"

namespace twinfer::ml {
namespace {

Aggregate aggregate_of(const std::string& s, const graph::Node& n) {
  if (s == "SUM") return Aggregate::kSum;
  if (s == "AVERAGE") return Aggregate::kAverage;
  if (s == "MIN") return Aggregate::kMin;
  if (s == "MAX") return Aggregate::kMax;
  throw Error(ErrorKind::kInvalidArgument, "aggregate_function must be SUM, AVERAGE, MIN or MAX, got '" + s + "'",
              n.name, n.op_type);
}

// Scores as onnxruntime decides on them: summed in double, then rounded to
// float for float (and float16) input. Decided on the double sum, five
// leaves of 0.1f made 0.50000000745, not 0.5, and a binary forest's tie
// picked class 1 (up to a fifth of rows); equal float votes summed in other
// orders broke multiclass ties the other way. (Summing in float instead
// makes ten 0.1f votes 1.0000001, and a probability of -1.2e-7.)
inline double in_type(double v, bool in_float) { return in_float ? static_cast<double>(static_cast<float>(v)) : v; }

// Rows are scored a block at a time: every tree walked over the block's
// rows (tree_walk.h), the leaves' weights added up per row and target.
constexpr int64_t kBlockRows = 64;

// A block's per-target sums (or extremes) over the trees, row by row, with
// which targets any leaf gave a weight.
struct BlockScores {
  std::vector<double> value;
  std::vector<uint8_t> seen;
  double* row_value(int64_t r, int64_t targets) { return value.data() + r * targets; }
  uint8_t* row_seen(int64_t r, int64_t targets) { return seen.data() + r * targets; }
};

// The forest as the kernels walk it: in the features' own type where that is
// exact (float features, float thresholds), else in double.
class Forest {
 public:
  Forest(const TreeEnsembleModel& m, DType x)
      : model_(&m), use_floats_((x == DType::kFloat32 || x == DType::kFloat16) && thresholds_are_floats(m)) {
    if (use_floats_) floats_ = TreeWalk<float>(m);
    else doubles_ = TreeWalk<double>(m);
  }

  // Every row of x ([N, F] or [F]) scored a block at a time, the blocks
  // spread over the threads: fn(first row, rows, the block's scores).
  template <typename Fn>
  void for_each_block(const TensorView& x, int num_threads, int64_t targets, Aggregate agg, Fn&& fn) const {
    const Rows r = rows_of(x.shape);
    const int64_t blocks = (r.n + kBlockRows - 1) / kBlockRows;
    parallel_for(blocks, num_threads, 1, [&](int64_t first, int64_t last) {
      BlockScores s;
      for (int64_t blk = first; blk < last; ++blk) {
        const int64_t b = blk * kBlockRows, rows = std::min(kBlockRows, r.n - b);
        score(x, r.f, b, rows, targets, agg, &s);
        fn(b, rows, s);
      }
    });
  }

 private:
  // Rows [b, b + rows) of x into s (targets per row), in the trees' order,
  // then averaged and rounded as onnxruntime does.
  void score(const TensorView& x, int64_t f, int64_t b, int64_t rows, int64_t targets, Aggregate agg,
             BlockScores* s) const {
    s->value.assign(static_cast<size_t>(rows * targets), 0.0);
    s->seen.assign(static_cast<size_t>(rows * targets), 0);
    switch (agg) {  // the aggregate chosen once, not per leaf
      case Aggregate::kSum:
      case Aggregate::kAverage: walk_rows<Aggregate::kSum>(x, f, b, rows, targets, s); break;
      case Aggregate::kMin: walk_rows<Aggregate::kMin>(x, f, b, rows, targets, s); break;
      case Aggregate::kMax: walk_rows<Aggregate::kMax>(x, f, b, rows, targets, s); break;
    }
    const bool in_float = x.dtype != DType::kFloat64;
    const double trees = static_cast<double>(model_->roots.size());
    for (double& v : s->value) v = in_type(agg == Aggregate::kAverage ? v / trees : v, in_float);
  }

  static double feature(const TensorView& x, int64_t i) {
    switch (x.dtype) {
      case DType::kFloat32: return x.as<const float>()[i];
      case DType::kFloat16: return half_to_float(x.as<const half_t>()[i].bits);
      case DType::kInt32: return x.as<const int32_t>()[i];
      case DType::kInt64: return static_cast<double>(x.as<const int64_t>()[i]);
      default: return x.as<const double>()[i];
    }
  }

  template <Aggregate A>
  void walk_rows(const TensorView& x, int64_t f, int64_t b, int64_t rows, int64_t targets, BlockScores* s) const {
    // Every leaf's targets are below `targets` (checked when the kernel was built).
    const std::pair<int64_t, double>* weights = model_->weights.data();
    double* value = s->value.data();
    uint8_t* seen = s->seen.data();
    const auto add = [&](int64_t r, uint32_t first, uint32_t count) {
      double* v = value + r * targets;
      uint8_t* sn = seen + r * targets;
      for (uint32_t k = first; k < first + count; ++k) {
        const int64_t t = weights[k].first;
        const double w = weights[k].second;
        if constexpr (A == Aggregate::kMin) v[t] = sn[t] && v[t] <= w ? v[t] : w;
        else if constexpr (A == Aggregate::kMax) v[t] = sn[t] && v[t] >= w ? v[t] : w;
        else v[t] += w;
        sn[t] = 1;
      }
    };
    if (use_floats_) {
      if (x.dtype == DType::kFloat32) {
        floats_.walk(x.as<const float>() + b * f, rows, f, add);
      } else {  // float16
        std::vector<float> rowsf(static_cast<size_t>(rows * f));
        const half_t* h = x.as<const half_t>() + b * f;
        for (size_t i = 0; i < rowsf.size(); ++i) rowsf[i] = half_to_float(h[i].bits);
        floats_.walk(rowsf.data(), rows, f, add);
      }
    } else if (x.dtype == DType::kFloat64) {
      doubles_.walk(x.as<const double>() + b * f, rows, f, add);
    } else {
      std::vector<double> rowsd(static_cast<size_t>(rows * f));
      for (int64_t i = 0; i < rows * f; ++i) rowsd[static_cast<size_t>(i)] = feature(x, b * f + i);
      doubles_.walk(rowsd.data(), rows, f, add);
    }
  }

  const TreeEnsembleModel* model_;  // the kernel's, which outlives this
  bool use_floats_;
  TreeWalk<float> floats_;
  TreeWalk<double> doubles_;
};

void check_features(const graph::Node& n, const TreeEnsembleModel& m, const Shape& x) {
  const int64_t f = x.size() == 1 ? x[0] : x.size() == 2 ? x[1] : -1;
  if (f < 0) bad_model(n, "X must be [N, F] or [F], got " + shape_str(x));
  if (m.features > f)
    throw Error(ErrorKind::kShape, "the trees read feature " + std::to_string(m.features - 1) + " but X has " +
                                       std::to_string(f) + " features", n.name, n.op_type);
}

// ---- regression: TreeEnsembleRegressor and TreeEnsemble ------------------------------

class TreeRegressorKernel final : public MlKernel {
 public:
  explicit TreeRegressorKernel(const KernelBuildInfo& info) : MlKernel(info) {
    const graph::Node& n = info.node();
    v5_ = n.op_type == "TreeEnsemble";
    model_ = v5_ ? model_from_v5(n) : model_from_legacy(n, "target");
    targets_ = n.attr_int("n_targets", v5_ ? -1 : 1);
    if (targets_ <= 0) bad_model(n, "n_targets must be positive");
    if (model_.targets > targets_)
      bad_model(n, "a leaf names target " + std::to_string(model_.targets - 1) + " of n_targets " +
                       std::to_string(targets_));
    if (v5_) {
      static const Aggregate kAgg[] = {Aggregate::kAverage, Aggregate::kSum, Aggregate::kMin, Aggregate::kMax};
      static const PostTransform kPost[] = {PostTransform::kNone, PostTransform::kSoftmax, PostTransform::kLogistic,
                                            PostTransform::kSoftmaxZero, PostTransform::kProbit};
      const int64_t a = n.attr_int("aggregate_function", 1), p = n.attr_int("post_transform", 0);
      if (a < 0 || a > 3) bad_model(n, "aggregate_function must be 0..3, got " + std::to_string(a));
      if (p < 0 || p > 4) bad_model(n, "post_transform must be 0..4, got " + std::to_string(p));
      agg_ = kAgg[a];
      post_ = kPost[p];
    } else {
      agg_ = aggregate_of(n.attr_string("aggregate_function", "SUM"), n);
      post_ = post_transform_attr(n);
      base_ = reals(n, "base_values");
      if (!base_.empty() && base_.size() != 1 && static_cast<int64_t>(base_.size()) != targets_)
        bad_model(n, "base_values must have one value or n_targets of them");
    }
    check_features(n, model_, info.input_shape(0));
    forest_ = std::make_unique<Forest>(model_, info.input_dtype(0));
  }

  void run(KernelContext& ctx) const override {
    const TensorView& x = ctx.inputs[0];
    const TensorView& y = ctx.outputs[0];
    const bool in_float = x.dtype != DType::kFloat64;
    forest_->for_each_block(x, ctx.num_threads, targets_, agg_, [&](int64_t b, int64_t rows, BlockScores& s) {
      std::vector<double> out(static_cast<size_t>(targets_));
      for (int64_t i = 0; i < rows; ++i) {
        finish(s.row_value(i, targets_), s.row_seen(i, targets_), &out, in_float);
        store(y, b + i, out);
      }
    });
  }

 private:
  // Base values and the transform, in onnxruntime's order: one target adds
  // base_values[0] (and takes PROBIT only); more add theirs and transform,
  // and a target no leaf gave a weight to stays 0.
  void finish(const double* value, const uint8_t* seen, std::vector<double>* out, bool in_float) const {
    if (targets_ == 1) {
      const double v = in_type(value[0] + in_type(base_.size() == 1 ? base_[0] : 0.0, in_float), in_float);
      (*out)[0] = post_ == PostTransform::kProbit ? probit(static_cast<float>(v)) : v;
      return;
    }
    const bool per_target = static_cast<int64_t>(base_.size()) == targets_;
    for (int64_t t = 0; t < targets_; ++t)
      (*out)[t] = seen[t] ? in_type(value[t] + in_type(per_target ? base_[t] : 0.0, in_float), in_float) : 0.0;
    if (post_ == PostTransform::kNone) return;
    std::vector<float> f(out->begin(), out->end()), tmp(f.size());
    write_scores(f, post_, SecondClass::kNone, tmp.data());
    std::copy(tmp.begin(), tmp.end(), out->begin());
  }

  void store(const TensorView& y, int64_t i, const std::vector<double>& v) const {
    for (int64_t t = 0; t < targets_; ++t) {
      const int64_t k = i * targets_ + t;
      switch (y.dtype) {
        case DType::kFloat32: y.as<float>()[k] = static_cast<float>(v[t]); break;
        case DType::kFloat64: y.as<double>()[k] = v[t]; break;
        case DType::kFloat16: y.as<half_t>()[k] = half_t{float_to_half(static_cast<float>(v[t]))}; break;
        default: fail(ErrorKind::kDType, std::string("Y of type ") + dtype_name(y.dtype));
      }
    }
  }

  bool v5_ = false;
  TreeEnsembleModel model_;
  std::unique_ptr<Forest> forest_;  // walks model_
  int64_t targets_ = 1;
  Aggregate agg_ = Aggregate::kSum;
  PostTransform post_ = PostTransform::kNone;
  std::vector<double> base_;
};

void regressor_infer(InferContext& c) {
  require_features(c, 0);
  c.set_output(0, DType::kFloat32, {rows_dim(c, 0), Dim(c.node().attr_int("n_targets", 1))});
}

void v5_infer(InferContext& c) {
  const DType t = c.input_dtype(0);
  if (!(t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16))
    c.fail(ErrorKind::kDType, std::string("X must be float, double or float16, got ") + dtype_name(t));
  if (!(c.node().has_attr("n_targets"))) c.fail(ErrorKind::kModelFormat, "has no n_targets");
  if (c.input_has_shape(0))
    if (!(c.input_shape(0).size() == 2))
      c.fail(ErrorKind::kShape, "X must be [N, F], got " + sym_shape_str(c.input_shape(0)));
  c.set_output(0, t, {rows_dim(c, 0), Dim(c.node().attr_int("n_targets", 1))});
}

// ---- TreeEnsembleClassifier --------------------------------------------------------------

class TreeClassifierKernel final : public MlKernel {
 public:
  explicit TreeClassifierKernel(const KernelBuildInfo& info)
      : MlKernel(info), labels_(class_labels(info.node(), "classlabels_int64s")) {
    const graph::Node& n = info.node();
    model_ = model_from_legacy(n, "class");
    post_ = post_transform_attr(n);
    base_ = reals(n, "base_values");
    classes_ = static_cast<int64_t>(labels_.size());
    if (classes_ == 0) bad_model(n, "has no classlabels_int64s or classlabels_strings");
    // The two-class rules below read and write two columns: one label would
    // read past its scores and labels (a classifier is fitted on two or more).
    if (classes_ == 1) bad_model(n, "has a single class label; a classifier needs two or more");
    if (model_.targets > classes_)
      bad_model(n, "a leaf names class " + std::to_string(model_.targets - 1) + " of " + std::to_string(classes_));
    std::vector<int64_t> ids = n.attr_ints("class_ids");
    std::sort(ids.begin(), ids.end());
    const std::vector<double> w = reals(n, "class_weights");
    for (double v : w) all_positive_ = all_positive_ && v >= 0;
    binary_ = classes_ == 2 && std::unique(ids.begin(), ids.end()) - ids.begin() == 1;
    check_features(n, model_, info.input_shape(0));
    forest_ = std::make_unique<Forest>(model_, info.input_dtype(0));
  }

  void run(KernelContext& ctx) const override {
    const TensorView& x = ctx.inputs[0];
    const TensorView& y = ctx.outputs[0];
    float* z = ctx.outputs.size() > 1 && ctx.outputs[1].data ? ctx.outputs[1].as<float>() : nullptr;
    const bool in_float = x.dtype != DType::kFloat64;
    const auto classify_block = [&](int64_t b, int64_t rows, BlockScores& s) {
      std::vector<float> out(static_cast<size_t>(classes_));
      for (int64_t i = 0; i < rows; ++i) {
        std::fill(out.begin(), out.end(), 0.f);
        classify(s.row_value(i, classes_), s.row_seen(i, classes_), y, b + i, out.data(), in_float);
        if (z) std::copy(out.begin(), out.end(), z + (b + i) * classes_);
      }
    };
    forest_->for_each_block(x, ctx.num_threads, classes_, Aggregate::kSum, classify_block);
  }

 private:
  // onnxruntime's classifier: more than two classes add base_values (a class
  // no leaf scored takes its base value) and pick the highest scored class.
  // Two classes: with two base values and a score for class 1, the scores
  // become [-(b1 + s0), b1 + s0]; one base value adds to class 0; none leaves
  // them. A single scored column then decides by sign (or > 0.5 when every
  // weight is positive) and expands to two columns; see write_scores.
  void classify(double* v, uint8_t* seen, const TensorView& y, int64_t i, float* out, bool in_float) const {
    const auto r = [&](double d) { return in_type(d, in_float); };
    if (classes_ > 2) {
      for (size_t k = 0; k < base_.size() && k < static_cast<size_t>(classes_); ++k) {
        v[k] = r(v[k] + r(base_[k]));
        seen[k] = 1;
      }
      int64_t best = -1;
      for (int64_t k = 0; k < classes_; ++k)
        if (seen[k] && (best < 0 || v[k] > v[best])) best = k;
      labels_.write(y, i, static_cast<size_t>(std::max<int64_t>(best, 0)));
      std::vector<float> f(v, v + classes_);
      write_scores(f, post_, SecondClass::kNone, out);
      return;
    }
    // Without base values a single score expands as [-s, s] (unless the
    // binary rule below says otherwise); with them it is written alone.
    SecondClass second = base_.empty() ? SecondClass::kMixed : SecondClass::kNone;
    bool two = true;  // both columns kept
    if (base_.size() == 2) {
      if (seen[1]) {
        v[1] = r(r(base_[1]) + v[0]);
        v[0] = -v[1];
      } else {
        v[1] = r(v[1] + r(base_[1]));
        v[0] = r(v[0] + r(base_[0]));
      }
    } else if (base_.size() <= 1) {
      if (base_.size() == 1) v[0] = r(v[0] + r(base_[0]));
      two = seen[1];
    }
    // The weight that decides: class 1's when scored, else class 0's.
    const double pos = two && seen[1] ? v[1] : (seen[0] ? v[0] : 0.0);
    size_t label = pos > 0 ? 1 : 0;
    if (binary_) {
      label = (all_positive_ ? pos > 0.5 : pos > 0) ? 1 : 0;
      second = all_positive_ ? SecondClass::kComplement : SecondClass::kMixed;
    }
    labels_.write(y, i, label);
    // Only scored classes are written; the others count as 0.
    std::vector<float> f{seen[0] ? static_cast<float>(v[0]) : 0.f};
    if (two) f.push_back(seen[1] ? static_cast<float>(v[1]) : 0.f);
    write_scores(f, post_, second, out);
  }

  ClassLabels labels_;
  TreeEnsembleModel model_;
  std::unique_ptr<Forest> forest_;  // walks model_
  PostTransform post_ = PostTransform::kNone;
  std::vector<double> base_;
  int64_t classes_ = 0;
  bool binary_ = false, all_positive_ = true;
};

void classifier_infer(InferContext& c) {
  require_features(c, 0);
  post_transform_attr(c.node());
  const ClassLabels labels = class_labels(c.node(), "classlabels_int64s");
  if (!(labels.size() > 0)) c.fail(ErrorKind::kModelFormat, "has no classlabels_int64s or classlabels_strings");
  c.set_output(0, labels.dtype(), {rows_dim(c, 0)});
  if (c.has_output(1)) c.set_output(1, DType::kFloat32, {rows_dim(c, 0), Dim(static_cast<int64_t>(labels.size()))});
}

bool tree_supports(const KernelBuildInfo& info, std::string* why) {
  if (info.input_dtype(0) == DType::kFloat16 && info.node().op_type == "TreeEnsemble") return true;
  return features_supported(info, 0, why);
}

}  // namespace

TWINFER_REGISTER_SCHEMA("TreeEnsemble", v5_infer, kMlDomain);
TWINFER_REGISTER_KERNEL("TreeEnsemble", Backend::kCPU, 0, tree_supports, make_kernel<TreeRegressorKernel>, kMlDomain);
TWINFER_REGISTER_SCHEMA("TreeEnsembleRegressor", regressor_infer, kMlDomain);
TWINFER_REGISTER_KERNEL("TreeEnsembleRegressor", Backend::kCPU, 0, tree_supports, make_kernel<TreeRegressorKernel>,
                        kMlDomain);
TWINFER_REGISTER_SCHEMA("TreeEnsembleClassifier", classifier_infer, kMlDomain);
TWINFER_REGISTER_STRING_KERNEL("TreeEnsembleClassifier", 0, tree_supports, make_kernel<TreeClassifierKernel>,
                               kMlDomain);

}  // namespace twinfer::ml
