#include "graph/passes/expand_contrib_util.h"

#include <algorithm>

#include "graph/passes/infer_and_fold.h"

namespace twinfer::passes::contrib {

namespace {

bool told(const graph::Value& v) {
  return v.is_constant() || (v.has_shape && v.dtype != DType::kUndefined);
}

}  // namespace

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
  for (const Node& n : built) {
    const bool has_body = std::any_of(n.attrs.begin(), n.attrs.end(),
                                      [](const auto& kv) { return kv.second.g || !kv.second.graphs.empty(); });
    if (!has_body) upstream.nodes.push_back(n);
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
