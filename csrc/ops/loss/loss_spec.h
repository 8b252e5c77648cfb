// NegativeLogLikelihoodLoss / SoftmaxCrossEntropyLoss as both backends'
// kernels see a node (host only): the reduction, the [N, C, D] geometry, the
// optional weight, ignore_index and log_prob output, checked against the
// shapes once when a kernel is built, so the CPU kernel (losses.cc) and
// CUDA's (backends/cuda/loss.cu) accept and refuse the same nodes with the
// same messages. The per-element math is loss_math.h.
#pragma once
#include <string>

#include "ops/elementwise/typeset.h"
#include "ops/kernel.h"
#include "ops/loss/loss_math.h"

namespace twinfer::loss {

template <typename Ctx>
Reduction reduction_of(const Ctx& c) {
  const std::string r = c.node().attr_string("reduction", "mean");
  if (r == "none") return Reduction::kNone;
  if (r == "sum") return Reduction::kSum;
  if (r == "mean") return Reduction::kMean;
  c.fail(ErrorKind::kUnsupportedOp, "unknown reduction '" + r + "'");
}

// Element types of the kernels (scores, weights, loss and log_prob):
// float16/bfloat16 compute in float, as loss_math.h says.
inline constexpr unsigned kLossTypes = ew::kF32 | ew::kF64 | ew::kF16 | ew::kBF16;

// The dtype checks of supports(): scores in kLossTypes, targets int32/int64.
inline bool loss_dtypes_supported(const KernelBuildInfo& info, std::string* why) {
  if (!ew::check_input_dtype(info, 0, kLossTypes, why)) return false;
  const DType it = info.input_dtype(1);
  if (it != DType::kInt32 && it != DType::kInt64) {
    if (why) *why = info.node().op_type + " takes int32/int64 targets, not " + dtype_name(it);
    return false;
  }
  return true;
}

struct LossSpec {
  explicit LossSpec(const KernelBuildInfo& info)
      : node(info.node().name), op(info.node().op_type), sce(op == "SoftmaxCrossEntropyLoss"),
        red(reduction_of(info)) {
    const Shape x = info.input_shape(0), t = info.input_shape(1);
    if (x.size() < 2) info.fail(ErrorKind::kShape, "input must have rank >= 2, got " + shape_str(x));
    Shape expect{x[0]};
    expect.insert(expect.end(), x.begin() + 2, x.end());
    if (t != expect)
      info.fail(ErrorKind::kShape, "target " + shape_str(t) + " does not match the input " + shape_str(x) +
                                       " (expected " + shape_str(expect) + ")");
    N = x[0];
    C = x[1];
    D = shape_numel(Shape(x.begin() + 2, x.end()));
    has_weight = info.has_input(2);
    if (has_weight && info.input_shape(2) != Shape{C})
      info.fail(ErrorKind::kShape,
                "weights must have shape [" + std::to_string(C) + "], got " + shape_str(info.input_shape(2)));
    has_ignore = info.node().has_attr("ignore_index");
    ignore = info.node().attr_int("ignore_index", 0);
    want_log_prob = sce && info.num_outputs() > 1 && info.has_output(1);
  }

  int64_t elements() const { return N * D; }  // target elements (rows of C scores)

  std::string node, op;
  bool sce;
  Reduction red;
  int64_t N = 0, C = 0, D = 1;
  bool has_weight = false, has_ignore = false, want_log_prob = false;
  int64_t ignore = 0;
};

}  // namespace twinfer::loss
