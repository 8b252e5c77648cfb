// A classifier's string labels (classlabels_strings) as its class indices
// and a LabelEncoder from index to label: TreeEnsembleClassifier,
// SVMClassifier and LinearClassifier then write int64 indices, which a plan
// holds, and only the LabelEncoder goes to the host evaluator (strings live
// only there: runtime/plan_split.h). Before, the string output sent the whole
// graph to the evaluator, whose kernels are built on every run: a 100-tree
// forest took 24 ms a call to rebuild where onnxruntime scored a row in 9 us.
// Every classifier picks its label by index (ops/ml/ml_common.h's
// ClassLabels), so the indices and the encoder give the same strings.
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {

// Returns the number of classifiers rewritten (top-level graph only).
int string_labels_as_indices(graph::Graph& g, const PassContext& pc);

}  // namespace twinfer::passes
