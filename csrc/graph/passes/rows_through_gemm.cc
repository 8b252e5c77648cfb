#include "graph/passes/rows_through_gemm.h"

#include "graph/domains.h"
#include "graph/passes/rewrite_util.h"
#include "graph/passes/strided_view.h"

namespace twinfer::passes {

namespace {

bool is(const graph::Node& n, const char* op) {
  return n.op_type == op && (n.domain.empty() || n.domain == kTwinferDomain);
}

// The perm of a Transpose that moves rows only (its last axis stays last).
bool row_perm(const graph::Node& t, size_t rank, std::vector<int64_t>* perm) {
  if (!t.domain.empty() || t.op_type != "Transpose" || rank < 2) return false;
  *perm = t.attr_ints("perm");
  return valid_perm(*perm, rank) && perm->back() == static_cast<int64_t>(rank) - 1;
}

}  // namespace

bool transpose_rows_after_gemm(graph::Graph& g, const std::vector<std::vector<int>>& users, int mm) {
  const graph::Node& n = g.nodes[mm];
  Shape x, w, y;
  if (!is(n, "MatMul") || n.inputs.size() < 2 || n.outputs.size() != 1 || !concrete_shape(g, n.inputs[1], &w) ||
      w.size() != 2 || !concrete_shape(g, n.outputs[0], &y))
    return false;
  if (n.domain == kTwinferDomain && n.inputs.size() > 3) return false;  // a residual is not moved with the rows
  const int xt = n.inputs[0];
  const int tp = xt >= 0 ? g.values[xt].producer : -1;
  std::vector<int64_t> perm;
  if (tp < 0 || !concrete_shape(g, xt, &x) || !row_perm(g.nodes[tp], x.size(), &perm) || is_graph_output(g, xt) ||
      users[xt].size() != 1)
    return false;
  const int src = g.nodes[tp].inputs[0];
  Shape s;
  if (!concrete_shape(g, src, &s)) return false;
  Shape ys(s.begin(), s.end() - 1);
  ys.push_back(w[1]);
  const int y_old = n.outputs[0];
  const int y_new = shaped_value(g, g.values[y_old].name + "/rows", g.values[y_old].dtype, ys);
  graph::Node moved = g.nodes[mm];
  moved.inputs[0] = src;
  moved.outputs[0] = y_new;
  graph::Node t = transpose_node(g.nodes[tp].name + "/after", y_new, y_old, perm);
  g.nodes[mm] = std::move(moved);
  g.nodes.erase(g.nodes.begin() + tp);  // tp < mm: the Transpose came first
  g.nodes.push_back(std::move(t));
  g.topo_sort();
  return true;
}

bool transpose_rows_before_gemm(graph::Graph& g, const std::vector<std::vector<int>>& users, int gemm) {
  const graph::Node& n = g.nodes[gemm];
  Shape a, b, y;
  if (n.outputs.size() != 1 || n.inputs.size() < 2 || !concrete_shape(g, n.inputs[0], &a) || !concrete_shape(g, n.inputs[1], &b) ||
      a.size() != 2 || b.size() != 2 || !concrete_shape(g, n.outputs[0], &y))
    return false;
  if (is(n, "Gemm")) {
    if (n.attr_int("transA", 0) != 0) return false;
    Shape c;
    if (n.inputs.size() > 2 && n.inputs[2] >= 0 && (!concrete_shape(g, n.inputs[2], &c) || !(c.size() == 1 || (c.size() == 2 && c[0] == 1))))
      return false;  // a C with rows of its own would have to move too
  } else if (!is(n, "MatMul") || (n.domain == kTwinferDomain && n.inputs.size() > 3)) {
    return false;
  }
  auto sole = [&](int v) { return v >= 0 && !is_graph_output(g, v) && users[v].size() == 1 ? users[v][0] : -1; };
  const int r1 = sole(n.outputs[0]);
  if (r1 < 0 || !is_reshape_like(g.nodes[r1])) return false;
  Shape ys;
  const int yv = g.nodes[r1].outputs[0];
  if (!concrete_shape(g, yv, &ys) || ys.empty() || ys.back() != y[1]) return false;
  const int t2 = sole(yv);
  std::vector<int64_t> perm;
  if (t2 < 0 || !row_perm(g.nodes[t2], ys.size(), &perm)) return false;
  const int z = g.nodes[t2].outputs[0];
  Shape zs;
  if (!concrete_shape(g, z, &zs)) return false;

  // x [R, K] -> [rows of ys..., K] -> moved -> [R, K] -> the GEMM -> [R, N] -> z's shape.
  const DType dt = g.values[n.inputs[0]].dtype;
  const std::string base = g.nodes[t2].name;
  Shape xs(ys.begin(), ys.end() - 1);
  xs.push_back(a[1]);
  Shape xt(xs.size());
  for (size_t d = 0; d < xs.size(); ++d) xt[d] = xs[perm[d]];
  const int v1 = shaped_value(g, base + "/rows_in", dt, xs);
  const int v2 = shaped_value(g, base + "/rows_moved", dt, xt);
  const int v3 = shaped_value(g, base + "/gemm_in", dt, a);
  const int v4 = shaped_value(g, base + "/gemm_out", g.values[n.outputs[0]].dtype, y);
  std::vector<graph::Node> added;
  added.push_back(reshape_node(g, base + "/split_rows", g.nodes[gemm].inputs[0], v1, xs));
  added.push_back(transpose_node(base + "/before", v1, v2, perm));
  added.push_back(reshape_node(g, base + "/join_rows", v2, v3, a));
  graph::Node moved = g.nodes[gemm];
  moved.inputs[0] = v3;
  moved.outputs[0] = v4;
  added.push_back(std::move(moved));
  added.push_back(reshape_node(g, base + "/rows_out", v4, z, zs));
  std::vector<char> dead(g.nodes.size(), 0);
  dead[gemm] = dead[r1] = dead[t2] = 1;
  erase_nodes(g, dead);
  for (auto& node : added) g.nodes.push_back(std::move(node));
  g.topo_sort();
  return true;
}

}  // namespace twinfer::passes
