#include "graph/passes/splice_body.h"

#include "graph/passes/rewrite_util.h"

namespace twinfer::passes {

std::vector<int> splice_body(graph::Graph& g, const graph::Graph& body, const std::string& prefix,
                             const std::vector<int>& bound, const std::unordered_map<std::string, int>& outer,
                             std::vector<graph::Node>* added) {
  if (body.inputs.size() > bound.size()) return {};
  std::vector<int> id(body.values.size(), -1);
  for (size_t i = 0; i < body.inputs.size(); ++i)
    if (body.inputs[i] >= 0) id[body.inputs[i]] = bound[i];
  for (size_t v = 0; v < body.values.size(); ++v) {
    if (id[v] >= 0) continue;
    const graph::Value& bv = body.values[v];
    if (bv.is_constant()) {
      id[v] = add_constant(g, prefix + "/" + bv.name, bv.constant);
    } else if (bv.producer >= 0) {
      id[v] = add_value(g, prefix + "/" + bv.name);
      graph::Value& pv = g.values[id[v]];
      pv.dtype = bv.dtype;
      pv.elem_type = bv.elem_type;
      pv.has_shape = bv.has_shape;
      pv.shape = bv.shape;
    } else {
      auto it = outer.find(bv.name);
      if (it != outer.end()) id[v] = it->second;
    }
  }
  std::vector<int> outs;
  for (int o : body.outputs) {
    if (o < 0 || id[o] < 0) return {};
    outs.push_back(id[o]);
  }
  for (const graph::Node& bn : body.nodes) {
    graph::Node c = bn;
    c.name = prefix + "/" + bn.name;
    for (int& in : c.inputs)
      if (in >= 0) {
        if (id[in] < 0) return {};  // a name neither the body nor the node around it defines
        in = id[in];
      }
    for (int& out : c.outputs)
      if (out >= 0) out = id[out];
    added->push_back(std::move(c));
  }
  return outs;
}

}  // namespace twinfer::passes
