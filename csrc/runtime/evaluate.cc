#include "runtime/evaluate.h"

#include <unordered_set>

#include "graph/passes/infer_and_fold.h"
#include "runtime/eval_kernels.h"

namespace twinfer {

namespace {

// If / Loop / Scan (ops/control) evaluate their bodies through this, with
// kernels kept across evaluations (TWINFER_EVAL_KERNEL_REUSE=0: none).
std::shared_ptr<KernelReuse> new_eval_kernels() {
  return eval_kernel_reuse_wanted() ? std::make_shared<EvalKernels>() : nullptr;
}
const bool kRegistered = (set_subgraph_evaluator(evaluate_graph), set_kernel_reuse_factory(new_eval_kernels), true);

void bind(graph::Value& v, const Tensor& t) {
  v.dtype = t.dtype();
  if (dtype_is_container(t.dtype())) {  // sequences/optionals have no shape
    v.elem_type = t.list().elem_type;
    v.has_shape = false;
    v.shape.clear();
  } else {
    v.has_shape = true;
    v.shape = sym_shape_from(t.shape());
  }
  v.constant = t;
}

// The data of a tensor, and of every item of a sequence/optional.
void collect_data(const Tensor& t, std::unordered_set<const void*>* out) {
  if (!t.defined()) return;
  if (!dtype_is_container(t.dtype())) {
    if (t.data()) out->insert(t.data());
    return;
  }
  out->insert(t.data());
  for (const Tensor& item : t.list().items) collect_data(item, out);
}

// `t`, with every array in it that aliases `foreign` memory copied. Sequence
// ops share items instead of copying them, so an output list may hold an
// input's or a weight's array; the caller owns outputs and may write them.
Tensor detach(const Tensor& t, const std::unordered_set<const void*>& foreign) {
  if (!dtype_is_container(t.dtype())) return foreign.count(t.data()) ? t.clone() : t;
  std::vector<Tensor> items;
  for (const Tensor& item : t.list().items) items.push_back(detach(item, foreign));
  return Tensor::container(t.dtype(), t.list().elem_type, std::move(items));
}

}  // namespace

std::vector<Tensor> evaluate_graph(const graph::Graph& graph, const std::vector<Tensor>& inputs,
                                   const std::vector<std::pair<std::string, Tensor>>& outer,
                                   const EvalOptions& options) {
  if (inputs.size() != graph.inputs.size())
    throw Error(ErrorKind::kInvalidArgument, "graph '" + graph.name + "' takes " + std::to_string(graph.inputs.size()) +
                                                 " inputs, got " + std::to_string(inputs.size()));
  graph::Graph g = graph;  // constants share storage with the original
  std::unordered_set<const void*> foreign;  // data we must not hand back as an output
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    bind(g.values[g.inputs[i]], inputs[i]);
    collect_data(inputs[i], &foreign);
  }
  for (const auto& [name, t] : outer) {
    const int id = g.find_value(name);
    if (id < 0) continue;
    bind(g.values[id], t);
    collect_data(t, &foreign);
  }
  for (const auto& v : graph.values)
    if (v.is_constant()) collect_data(v.constant, &foreign);
  // The run's own values (what kernels kept across runs must not build in):
  // all but the graph's weights. Inputs and outer values are the run's even
  // where the graph holds them as constants (a plan's tail binds its shape
  // inputs' values; the caller may change an array in place).
  std::vector<char> per_run(g.values.size(), 1);
  for (size_t v = 0; v < graph.values.size(); ++v) per_run[v] = !graph.values[v].is_constant();
  for (int v : graph.inputs) per_run[static_cast<size_t>(v)] = 1;
  for (const auto& [name, t] : outer) {
    const int id = graph.find_value(name);
    if (id >= 0) per_run[static_cast<size_t>(id)] = 1;
  }
  passes::PassContext pc;
  pc.opset = options.opset;
  pc.backend = Backend::kCPU;
  pc.precision = options.precision;
  pc.evaluate_all = true;
  pc.num_threads = options.num_threads;
  pc.reuse = options.reuse;
  pc.per_run = &per_run;
  passes::infer_and_fold(g, pc, true);

  std::vector<Tensor> out;
  for (int v : g.outputs) {
    const auto& val = g.values[v];
    if (!val.is_constant()) {
      for (const auto& n : g.nodes)
        for (int o : n.outputs)
          if (o >= 0 && !g.values[o].is_constant())
            throw Error(ErrorKind::kUnsupportedOp,
                        "could not evaluate '" + g.values[o].name +
                            "': its shape is unknown even with the input values known",
                        n.name, n.op_type);
      throw Error(ErrorKind::kShape, "graph output '" + val.name + "' could not be evaluated");
    }
    out.push_back(detach(val.constant, foreign));
  }
  return out;
}

}  // namespace twinfer
