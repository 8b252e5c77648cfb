// Eager evaluation of a graph on the CPU: inputs (and outer-scope values)
// become constants and constant folding runs every node in order, each shape
// rule seeing the values computed before it. Used for plans whose shapes
// depend on input values, and for the bodies of If / Loop / Scan.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "graph/ir.h"
#include "ops/control/subgraph_eval.h"  // EvalOptions

namespace twinfer {

// The contract of SubgraphEvaluator (ops/control/subgraph_eval.h); this is
// the implementation registered there for If / Loop / Scan bodies.
std::vector<Tensor> evaluate_graph(const graph::Graph& g, const std::vector<Tensor>& inputs,
                                   const std::vector<std::pair<std::string, Tensor>>& outer,
                                   const EvalOptions& options);

}  // namespace twinfer
