#include "graph/passes/expand_contrib_util.h"

#include <algorithm>

#include "graph/passes/infer_and_fold.h"

namespace twinfer::passes::contrib {

namespace {

bool told(const graph::Value& v) {
  return v.is_constant() || (v.has_shape && v.dtype != DType::kUndefined);
}

// The graphs enclosing the one being rewritten, outermost first.
thread_local std::vector<const Graph*> enclosing;

// What an enclosing graph tells of a value a body reads from it by name.
const graph::Value* from_enclosing(const std::string& name) {
  for (auto it = enclosing.rbegin(); it != enclosing.rend(); ++it) {
    const int id = (*it)->find_value(name);
    if (id >= 0) return told((*it)->values[id]) ? &(*it)->values[id] : nullptr;
  }
  return nullptr;
}

}  // namespace

EnclosingGraph::EnclosingGraph(const Graph& g) { enclosing.push_back(&g); }
EnclosingGraph::~EnclosingGraph() { enclosing.pop_back(); }

std::vector<graph::Value> upstream_values(const Graph& g, const std::vector<Node>& built, int64_t opset,
                                          const std::vector<int>& ids) {
  std::vector<graph::Value> out;
  bool all_told = true;
  for (int v : ids) {
    out.push_back(v >= 0 ? g.values[v] : graph::Value{});
    all_told = all_told && (v < 0 || told(out.back()));
  }
  if (all_told) return out;
  Graph upstream;
  upstream.values = g.values;
  upstream.inputs = g.inputs;
  std::vector<char> made(g.values.size(), 0);
  for (const Node& n : built) {
    for (int o : n.outputs)
      if (o >= 0 && static_cast<size_t>(o) < made.size()) made[o] = 1;
    const bool has_body = std::any_of(n.attrs.begin(), n.attrs.end(),
                                      [](const auto& kv) { return kv.second.g || !kv.second.graphs.empty(); });
    if (!has_body) upstream.nodes.push_back(n);
  }
  // A body's reads of its enclosing graphs' values, typed as they are there.
  for (size_t v = 0; v < upstream.values.size() && !enclosing.empty(); ++v) {
    graph::Value& val = upstream.values[v];
    if (made[v] || told(val)) continue;
    if (const graph::Value* outer = from_enclosing(val.name)) {
      val.dtype = outer->dtype;
      val.has_shape = outer->has_shape;
      val.shape = outer->shape;
      val.constant = outer->constant;
    }
  }
  for (int v : ids)
    if (v >= 0) upstream.outputs.push_back(v);
  PassContext ctx;
  ctx.opset = opset;
  try {
    infer_and_fold(upstream, ctx, true);
  } catch (const Error&) {
    return out;  // the real error comes at inference, with the whole graph
  }
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] >= 0) out[i] = upstream.values[ids[i]];
  return out;
}

}  // namespace twinfer::passes::contrib
