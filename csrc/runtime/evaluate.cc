#include "runtime/evaluate.h"

#include "graph/passes/infer_and_fold.h"

namespace twinfer {

namespace {

void bind(graph::Value& v, const Tensor& t) {
  v.dtype = t.dtype();
  v.has_shape = true;
  v.shape = sym_shape_from(t.shape());
  v.constant = t;
}

}  // namespace

std::vector<Tensor> evaluate_graph(const graph::Graph& graph, const std::vector<Tensor>& inputs,
                                   const std::vector<std::pair<std::string, Tensor>>& outer,
                                   const EvalOptions& options) {
  if (inputs.size() != graph.inputs.size())
    throw Error(ErrorKind::kInvalidArgument, "graph '" + graph.name + "' takes " + std::to_string(graph.inputs.size()) +
                                                 " inputs, got " + std::to_string(inputs.size()));
  graph::Graph g = graph;  // constants share storage with the original
  std::vector<const void*> foreign;  // data we must not hand back as an output
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    bind(g.values[g.inputs[i]], inputs[i]);
    foreign.push_back(inputs[i].data());
  }
  for (const auto& [name, t] : outer) {
    const int id = g.find_value(name);
    if (id < 0) continue;
    bind(g.values[id], t);
    foreign.push_back(t.data());
  }
  passes::PassContext pc;
  pc.opset = options.opset;
  pc.backend = Backend::kCPU;
  pc.precision = options.precision;
  pc.evaluate_all = true;
  pc.num_threads = options.num_threads;
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
    bool alias = graph.values[v].is_constant();
    for (const void* p : foreign) alias |= p == val.constant.data();
    out.push_back(alias ? val.constant.clone() : val.constant);
  }
  return out;
}

}  // namespace twinfer
