// Eager evaluation of a graph on the CPU: inputs (and outer-scope values)
// become constants and constant folding runs every node in order, each shape
// rule seeing the values computed before it. Used for plans whose shapes
// depend on input values, and for the bodies of If / Loop / Scan.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "core/tensor.h"
#include "graph/ir.h"

namespace twinfer {

struct EvalOptions {
  int64_t opset = 17;
  Precision precision = Precision::kFP32;
  int num_threads = 1;
};

// inputs: one per g.inputs, in order. outer: values the graph reads by name
// that it does not define (subgraph free variables). Returns one tensor per
// graph output; outputs never alias an input, an outer value or a weight.
std::vector<Tensor> evaluate_graph(const graph::Graph& g, const std::vector<Tensor>& inputs,
                                   const std::vector<std::pair<std::string, Tensor>>& outer,
                                   const EvalOptions& options);

}  // namespace twinfer
