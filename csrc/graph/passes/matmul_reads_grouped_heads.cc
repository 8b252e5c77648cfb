#include "graph/passes/matmul_reads_grouped_heads.h"

#include "graph/passes/grouped_heads.h"
#include "graph/passes/rewrite_check.h"
#include "graph/passes/rewrite_util.h"
#include "graph/passes/softmax_chain.h"

namespace twinfer::passes {

namespace {

bool is_op(const graph::Node& n, const char* op) { return n.domain.empty() && n.op_type == op; }

graph::Node node(const std::string& name, const char* op, std::vector<int> inputs, int output) {
  graph::Node n;
  n.name = name;
  n.op_type = op;
  n.inputs = std::move(inputs);
  n.outputs = {output};
  return n;
}

// One step between the repeat and the MatMul that commutes with repeating
// heads: a Transpose swapping the last two axes, a Cast, a Mul or Div by one
// element. The node's index and, for Mul / Div, which input is the repeated one.
struct HeadwiseStep {
  int node = -1;
  int through = 0;  // the input the chain runs through
};

bool one_element(const graph::Graph& g, int v) {
  Shape s;
  return v >= 0 && concrete_shape(g, v, &s) && s.size() <= 4 && shape_numel(s) == 1;
}

// Whether node n is such a step (then *step says how the chain runs through it).
bool headwise(const graph::Graph& g, int n, HeadwiseStep* step) {
  const graph::Node& node = g.nodes[n];
  if (node.inputs.empty() || node.inputs[0] < 0 || node.outputs.size() != 1) return false;
  step->node = n;
  step->through = 0;
  if (is_op(node, "Transpose")) return node.attr_ints("perm") == std::vector<int64_t>{0, 1, 3, 2};
  if (is_op(node, "Cast")) return true;
  if (node.inputs.size() != 2) return false;
  if (is_op(node, "Div")) return one_element(g, node.inputs[1]) && !one_element(g, node.inputs[0]);
  if (!is_op(node, "Mul")) return false;
  const bool first = one_element(g, node.inputs[0]), second = one_element(g, node.inputs[1]);
  if (first == second) return false;
  step->through = first ? 1 : 0;
  return true;
}

}  // namespace

int matmul_reads_grouped_heads(graph::Graph& g, const PassContext& pc) {
  const std::vector<std::vector<int>> users = value_users(g);
  std::vector<char> dead(g.nodes.size(), 0);
  std::vector<graph::Node> added;
  int rewritten = 0;
  const size_t count = g.nodes.size();
  for (size_t i = 0; i < count; ++i) {
    if (!is_op(g.nodes[i], "MatMul") || g.nodes[i].inputs.size() != 2 || g.nodes[i].outputs.empty()) continue;
    const graph::Node mm = g.nodes[i];  // a copy: values are added below
    const int a = mm.inputs[0], out = mm.outputs[0];
    if (a < 0 || out < 0 || is_graph_output(g, a)) continue;
    // From b up to the repeat, through steps that commute with it (the
    // scores' K^T, FlexAttention's scale on it, a Cast to the softmax's type).
    std::vector<HeadwiseStep> steps;  // nearest the MatMul first
    int v = mm.inputs[1], reader = static_cast<int>(i);
    std::vector<int> remove;
    int64_t groups = 0;
    int x = -1;
    for (int depth = 0; depth <= 4 && x < 0; ++depth) {
      x = grouped_source(g, users, dead, v, reader, pc.opset, &remove, &groups);
      if (x >= 0 || depth == 4) break;
      const int p = sole_producer(g, users, dead, v, reader);
      HeadwiseStep step;
      if (p < 0 || !headwise(g, p, &step)) break;
      steps.push_back(step);
      v = g.nodes[p].inputs[step.through];
      reader = p;
    }
    if (x < 0 || groups < 2) continue;
    Shape as, xs, ys;
    if (!concrete_shape(g, a, &as) || !concrete_shape(g, x, &xs) || !concrete_shape(g, out, &ys)) continue;
    if (as.size() != 4 || ys.size() != 4 || as[0] != xs[0] || as[1] != xs[1] * groups) continue;
    const int64_t B = as[0], kv_heads = xs[1], M = as[2], K = as[3], N = ys[3];
    const std::string base = mm.name.empty() ? g.values[out].name : mm.name;
    std::vector<graph::Node> nodes;
    // The steps again, on x: each keeps x's heads.
    int rhs = x;
    Shape rs = xs;
    for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
      graph::Node step = g.nodes[it->node];
      const int was = step.outputs[0];
      if (is_op(step, "Transpose")) std::swap(rs[2], rs[3]);
      const int now = shaped_value(g, g.values[was].name + "/ungrouped", g.values[was].dtype, rs);
      step.name += "/ungrouped";
      step.inputs[it->through] = rhs;
      step.outputs = {now};
      nodes.push_back(std::move(step));
      rhs = now;
    }
    if (rs[2] != K || rs[0] != B) continue;  // the inner dims the MatMul's check would meet
    const int rows = shaped_value(g, base + "/grouped_rows", g.values[a].dtype, {B, kv_heads, groups * M, K});
    nodes.push_back(reshape_node(g, base + "/group_rows", a, rows, {B, kv_heads, groups * M, K}));
    const int product = shaped_value(g, base + "/grouped_product", g.values[out].dtype, {B, kv_heads, groups * M, N});
    graph::Node gemm = node(base + "/grouped", "MatMul", {rows, rhs}, product);
    if (!rewrite_fits(g, gemm, pc)) continue;
    nodes.push_back(std::move(gemm));
    nodes.push_back(reshape_node(g, base + "/heads", product, out, ys));
    dead[i] = 1;
    for (const HeadwiseStep& st : steps) dead[st.node] = 1;
    for (int r : remove) dead[r] = 1;
    for (auto& n : nodes) added.push_back(std::move(n));
    ++rewritten;
  }
  if (rewritten) {
    replace_fused_nodes(g, dead, added);
    pc.note("matmul_reads_grouped_heads: " + std::to_string(rewritten) +
            " MatMuls read K/V once per group of query heads, not repeated");
  }
  return rewritten;
}

}  // namespace twinfer::passes
