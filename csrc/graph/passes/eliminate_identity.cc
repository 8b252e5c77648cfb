#include "graph/passes/eliminate_identity.h"

#include "graph/passes/rewrite_util.h"

namespace twinfer::passes {

static bool is_identity_like(const graph::Graph& g, const graph::Node& n) {
  if (!n.domain.empty()) return false;
  if (n.inputs.empty() || n.inputs[0] < 0 || n.outputs.empty() || n.outputs[0] < 0) return false;
  if (n.op_type == "Identity") return true;
  if (n.op_type == "Dropout") {
    // Inference mode: the mask output must be unused (or absent).
    return n.outputs.size() < 2 || n.outputs[1] < 0;
  }
  if (n.op_type == "Cast") {
    const auto& in = g.values[n.inputs[0]];
    const auto& out = g.values[n.outputs[0]];
    return in.dtype != DType::kUndefined && in.dtype == out.dtype;
  }
  return false;
}

int eliminate_identity(graph::Graph& g, const PassContext& ctx) {
  std::vector<char> dead(g.nodes.size(), 0);
  int removed = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const auto& n = g.nodes[i];
    if (!is_identity_like(g, n)) continue;
    int in = n.inputs[0], out = n.outputs[0];
    if (is_graph_output(g, out)) continue;
    replace_uses(g, out, in);
    dead[i] = 1;
    ++removed;
  }
  if (removed) {
    erase_nodes(g, dead);
    ctx.note("eliminate_identity: removed " + std::to_string(removed) + " nodes");
  }
  return removed;
}

}  // namespace twinfer::passes
