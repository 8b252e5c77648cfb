// How If, Loop and Scan run their bodies. Evaluating a graph is the
// runtime's job (runtime/evaluate.cc: constant folding node by node), and
// the runtime sits above ops, so ops only declare the entry point here and
// the runtime registers the implementation at static init. That keeps the
// include direction runtime -> ops without a cycle back.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "core/tensor.h"
#include "graph/ir.h"
#include "ops/kernel.h"

namespace twinfer {

struct EvalOptions {
  int64_t opset = 17;
  Precision precision = Precision::kFP32;
  int num_threads = 1;
  KernelReuse* reuse = nullptr;  // kernels kept across runs (ops/kernel.h); null: built per run
};

// inputs: one per g.inputs, in order. outer: values the graph reads by name
// that it does not define (subgraph free variables). Returns one tensor per
// graph output; outputs never alias an input, an outer value or a weight.
using SubgraphEvaluator = std::vector<Tensor> (*)(const graph::Graph& g, const std::vector<Tensor>& inputs,
                                                  const std::vector<std::pair<std::string, Tensor>>& outer,
                                                  const EvalOptions& options);

void set_subgraph_evaluator(SubgraphEvaluator fn);

// Kernels kept across a body's evaluations (each iteration of a Loop or
// Scan, each run of an If): the runtime registers what makes them
// (runtime/eval_kernels.h); null when none is registered or reuse is off.
using KernelReuseFactory = std::shared_ptr<KernelReuse> (*)();
void set_kernel_reuse_factory(KernelReuseFactory fn);
std::shared_ptr<KernelReuse> make_kernel_reuse();

// Runs the registered evaluator (throws kRuntime when there is none).
std::vector<Tensor> evaluate_subgraph(const graph::Graph& g, const std::vector<Tensor>& inputs,
                                      const std::vector<std::pair<std::string, Tensor>>& outer,
                                      const EvalOptions& options);

}  // namespace twinfer
