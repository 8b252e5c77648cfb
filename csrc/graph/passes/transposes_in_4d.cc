#include "graph/passes/transposes_in_4d.h"

#include "graph/passes/rewrite_util.h"
#include "graph/passes/softmax_chain.h"

namespace twinfer::passes {

namespace {

bool is_op(const graph::Node& n, const char* op) { return n.domain.empty() && n.op_type == op; }

}  // namespace

int transposes_in_4d(graph::Graph& g, const PassContext& pc) {
  const std::vector<std::vector<int>> users = value_users(g);
  std::vector<char> dead(g.nodes.size(), 0);
  std::vector<graph::Node> added;
  int rewritten = 0;
  const size_t count = g.nodes.size();
  for (size_t i = 0; i < count; ++i) {
    if (!is_op(g.nodes[i], "Reshape") || g.nodes[i].inputs.empty() || g.nodes[i].outputs.empty()) continue;
    const int back = static_cast<int>(i);
    const int t = sole_producer(g, users, dead, g.nodes[back].inputs[0], back);
    if (t < 0 || !is_op(g.nodes[t], "Transpose") || g.nodes[t].inputs.empty() ||
        g.nodes[t].attr_ints("perm") != std::vector<int64_t>{0, 2, 1})
      continue;
    const int flat = sole_producer(g, users, dead, g.nodes[t].inputs[0], t);
    if (flat < 0 || !is_op(g.nodes[flat], "Reshape") || g.nodes[flat].inputs.empty()) continue;
    const int u = g.nodes[flat].inputs[0], out = g.nodes[back].outputs[0];
    Shape us, fs, os;
    if (!concrete_shape(g, u, &us) || !concrete_shape(g, g.nodes[t].inputs[0], &fs) || !concrete_shape(g, out, &os))
      continue;
    const size_t r = us.size();
    if (r < 3 || fs.size() != 3 || os.size() != 4 || us[r - 2] != fs[1] || us[r - 1] != fs[2] ||
        os[0] * os[1] != fs[0] || os[2] != fs[2] || os[3] != fs[1])
      continue;
    const Shape heads{os[0], os[1], fs[1], fs[2]};  // u as [a, b, S, D]
    if (shape_numel(us) != shape_numel(heads)) continue;
    const std::string base = g.nodes[back].name.empty() ? g.values[out].name : g.nodes[back].name;
    int src = u;
    if (us != heads) {
      src = shaped_value(g, base + "/heads", g.values[u].dtype, heads);
      added.push_back(reshape_node(g, base + "/to_heads", u, src, heads));
    }
    added.push_back(transpose_node(base + "/transpose_4d", src, out, {0, 1, 3, 2}));
    dead[back] = dead[t] = dead[flat] = 1;
    ++rewritten;
  }
  if (rewritten) {
    replace_fused_nodes(g, dead, added);
    pc.note("transposes_in_4d: " + std::to_string(rewritten) + " transposes spelled in 3-D -> one 4-D Transpose");
  }
  return rewritten;
}

}  // namespace twinfer::passes
