// What If, Loop and Scan share: typing a subgraph from its inputs' types at
// shape-inference time, binding a node's captured outer values when a body
// runs, and byte copies between whole tensors and slices of them.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "graph/subgraph.h"
#include "ops/control/subgraph_eval.h"
#include "ops/kernel.h"
#include "ops/schema.h"

namespace twinfer::control {

struct ValueType {
  DType dtype = DType::kUndefined;
  bool has_shape = false;
  SymShape shape;
  std::vector<DType> elem_type;  // sequence/optional: the type inside (see graph::Value)
};

// The types of `sub`'s outputs when its inputs have `inputs` types (an
// undefined dtype keeps the subgraph's declaration) and its outer values are
// the node's captured inputs (types and constants taken from `c`).
std::vector<ValueType> infer_subgraph(const InferContext& c, const graph::Graph& sub,
                                      const std::vector<ValueType>& inputs);

// Two branches' types merged: equal dims kept, differing dims unknown, a
// differing rank unknown. Throws kDType naming the node when dtypes differ.
ValueType merge_types(const InferContext& c, const ValueType& a, const ValueType& b, size_t output);

void set_output_type(InferContext& c, size_t i, const ValueType& t);
ValueType input_type(const InferContext& c, size_t i);

// A kernel-side handle on one subgraph attribute and the node's outer values.
class Body {
 public:
  Body(const KernelBuildInfo& info, const char* attr);
  // Evaluates with `inputs`; outer values come from ctx's captured inputs.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, const KernelContext& ctx) const;
  const graph::Graph& graph() const { return *graph_; }

 private:
  std::shared_ptr<graph::Graph> graph_;
  std::vector<std::string> outer_names_;
  size_t outer_first_ = 0;  // index of the first captured input of the node
  EvalOptions options_;
  // The body's kernels, kept from one evaluation to the next (every
  // iteration of a Loop or Scan builds them again otherwise); shared by the
  // threads running this kernel, and safe for them (runtime/eval_kernels.h).
  std::shared_ptr<KernelReuse> reuse_;
};

// The shape of one part of a scan output that got no parts (a Loop of zero
// trips, a Scan over length 0), which no run shows: the node's planned
// output shape less the axes the scan adds (`added`, ascending positions),
// dims unknown at plan time 0 as onnxruntime makes them; else the body's
// declared output shape, the same way; else (rank unknown) none, and the
// output is [0]. Before, a part of symbolic shape made a rank-1 [0].
Shape empty_part_shape(const KernelBuildInfo& info, size_t node_output, const std::vector<int64_t>& added,
                       const graph::Value& body_output);

// A view as a Tensor that does not own its memory (valid during the run).
Tensor borrow_view(const TensorView& v);

// Copies freshly computed outputs into a static plan's output buffers,
// checking they have the planned shapes.
void copy_to_outputs(const std::vector<Tensor>& results, KernelContext& ctx, const std::string& node,
                     const std::string& op);

}  // namespace twinfer::control
