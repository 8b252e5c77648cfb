// What the ai.onnx.ml ops (graph/domains.h kMlDomain) share: their kernels'
// base, features read as rows, the score transforms, class labels and the
// attribute readers. Semantics follow onnxruntime, which is what models
// converted by skl2onnx, onnxmltools and others are checked against.
#pragma once
#include <string>
#include <vector>

#include "graph/domains.h"
#include "ops/kernel.h"
#include "ops/schema.h"

namespace twinfer::ml {

class MlKernel : public Kernel {
 public:
  explicit MlKernel(const KernelBuildInfo& info) : node_(info.node().name), op_(info.node().op_type) {}
  const char* impl_name() const override { return "ml"; }

 protected:
  [[noreturn]] void fail(ErrorKind kind, const std::string& msg) const { throw Error(kind, msg, node_, op_); }
  std::string node_, op_;
};

// ---- attributes ----------------------------------------------------------------

// Throws kModelFormat naming the node (an attribute missing or malformed).
[[noreturn]] void bad_model(const graph::Node& n, const std::string& msg);
// A float list attribute `name`, or its double-precision form `name_as_tensor`
// (ai.onnx.ml 3); empty when neither is there.
std::vector<double> reals(const graph::Node& n, const std::string& name);
std::vector<std::string> strings(const graph::Node& n, const std::string& name);
// A tensor attribute, or nullptr when absent.
const Tensor* tensor_attr(const graph::Node& n, const std::string& name);

// ---- features ---------------------------------------------------------------------

// Most ml ops take X as [N, F] or as one row [F], of float, double, int32 or int64.
bool is_feature_dtype(DType t);
void require_features(const InferContext& c, size_t i);
bool features_supported(const KernelBuildInfo& info, size_t i, std::string* why);
// N (rows) of X's shape in a shape rule: dim 0, or 1 for a 1-D X.
Dim rows_dim(const InferContext& c, size_t i);
struct Rows {
  int64_t n = 1, f = 0;
};
Rows rows_of(const Shape& x);
// X's values as float / double, row-major.
std::vector<float> as_floats(const TensorView& x);
std::vector<double> as_doubles(const TensorView& x);

// ---- scores -------------------------------------------------------------------------

enum class PostTransform { kNone, kSoftmax, kLogistic, kSoftmaxZero, kProbit };
PostTransform post_transform_of(const std::string& name, const graph::Node& n);
PostTransform post_transform_attr(const graph::Node& n);  // "post_transform", default NONE

float logistic(float v);
float probit(float v);
void softmax(float* v, int64_t n);
void softmax_zero(float* v, int64_t n);  // softmax that leaves zeros at zero

// How a single score becomes two columns (onnxruntime's add_second_class).
enum class SecondClass {
  kNone = -1,          // write the one score
  kComplement = 0,     // [1 - s, s], or [1 - logistic(s), logistic(s)] under LOGISTIC
  kMixed = 2,          // [-s, s], or [logistic(-s), logistic(s)] under LOGISTIC
};
// One row's scores (k of them) transformed and written to out: k >= 2 gets
// the transform; k == 1 gets probit under PROBIT, else `second`'s expansion.
void write_scores(std::vector<float>& scores, PostTransform t, SecondClass second, float* out);

// ---- class labels ----------------------------------------------------------------

struct ClassLabels {
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  bool use_strings() const { return !strings.empty(); }
  size_t size() const { return use_strings() ? strings.size() : ints.size(); }
  DType dtype() const { return use_strings() ? DType::kString : DType::kInt64; }
  // Writes label number k at y[i].
  void write(const TensorView& y, int64_t i, size_t k) const;
};
// classlabels_strings, or the int form under `ints_name`.
ClassLabels class_labels(const graph::Node& n, const char* ints_name);

// Writes an int64 or string label directly.
void write_label(const TensorView& y, int64_t i, int64_t v, const std::string& s);

}  // namespace twinfer::ml
