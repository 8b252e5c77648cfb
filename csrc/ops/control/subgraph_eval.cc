#include "ops/control/subgraph_eval.h"

#include "core/error.h"

namespace twinfer {

namespace {
// Constant-initialised (null) before any static initialiser runs, so the
// runtime's registration holds whatever the order of initialisation.
SubgraphEvaluator g_evaluator = nullptr;
KernelReuseFactory g_reuse_factory = nullptr;
}  // namespace

void set_subgraph_evaluator(SubgraphEvaluator fn) { g_evaluator = fn; }

void set_kernel_reuse_factory(KernelReuseFactory fn) { g_reuse_factory = fn; }

std::shared_ptr<KernelReuse> make_kernel_reuse() { return g_reuse_factory ? g_reuse_factory() : nullptr; }

std::vector<Tensor> evaluate_subgraph(const graph::Graph& g, const std::vector<Tensor>& inputs,
                                      const std::vector<std::pair<std::string, Tensor>>& outer,
                                      const EvalOptions& options) {
  if (!g_evaluator) throw Error(ErrorKind::kRuntime, "no graph evaluator is registered to run subgraphs");
  return g_evaluator(g, inputs, outer, options);
}

}  // namespace twinfer
