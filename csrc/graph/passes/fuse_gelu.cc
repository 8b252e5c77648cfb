#include "graph/passes/fuse_gelu.h"

#include <cmath>

#include "graph/passes/rewrite_check.h"
#include "graph/passes/rewrite_util.h"
#include "ops/kernel.h"

namespace twinfer::passes {

namespace {

bool near(double a, double b) { return std::fabs(a - b) < 1e-4 * std::fabs(b); }

bool is_op(const graph::Node& n, const char* op) { return is_default_op(n, op); }

// For a binary node, the input that is not the scalar constant `c` (to 1e-4); -1 if no match.
int other_input_if_const(const graph::Graph& g, const graph::Node& n, double c) {
  return passes::other_input_if_const(g, n, c, 1e-4);
}

}  // namespace

int fuse_gelu(graph::Graph& g, const PassContext& ctx) {
  if (!any_kernel_for("", "Gelu", ctx.backend)) return 0;
  auto users = value_users(g);
  std::vector<char> dead(g.nodes.size(), 0);
  auto sole = [&](int v) -> int {
    if (v < 0 || users[v].size() != 1 || is_graph_output(g, v)) return -1;
    return dead[users[v][0]] ? -1 : users[v][0];
  };
  // The node producing v when v's only reader is node `reader` and it is `op`.
  auto producer_for = [&](int v, int reader, const char* op) -> int {
    const int p = v >= 0 ? g.values[v].producer : -1;
    if (p < 0 || dead[p] || sole(v) != reader || !is_op(g.nodes[p], op)) return -1;
    return p;
  };
  // erf's input: x / sqrt(2) or x * (1/sqrt(2)); x, and the node, into *remove.
  auto erf_core = [&](int i, std::vector<int>* remove) -> int {
    const int scaled = g.nodes[i].inputs[0];
    int p = producer_for(scaled, i, "Div"), x = -1;
    double v;
    if (p >= 0 && scalar_constant(g, g.nodes[p].inputs[1], &v) && near(v, std::sqrt(2.0))) x = g.nodes[p].inputs[0];
    if (p < 0 && (p = producer_for(scaled, i, "Mul")) >= 0) x = other_input_if_const(g, g.nodes[p], 1.0 / std::sqrt(2.0));
    if (x >= 0) remove->push_back(p);
    return x;
  };
  // tanh's input: sqrt(2/pi) * (x + 0.044715 * x^3), as GPT-2's NewGELU and
  // torch's gelu(approximate="tanh") export it.
  auto tanh_core = [&](int i, std::vector<int>* remove) -> int {
    const int scale = producer_for(g.nodes[i].inputs[0], i, "Mul");
    if (scale < 0) return -1;
    const int sum_v = other_input_if_const(g, g.nodes[scale], std::sqrt(2.0 / M_PI));
    const int sum = producer_for(sum_v, scale, "Add");
    if (sum < 0) return -1;
    for (int k = 0; k < 2; ++k) {
      const int x = g.nodes[sum].inputs[k], cubed_scaled = g.nodes[sum].inputs[1 - k];
      const int mul = producer_for(cubed_scaled, sum, "Mul");
      if (mul < 0) continue;
      const int pow = producer_for(other_input_if_const(g, g.nodes[mul], 0.044715), mul, "Pow");
      double e;
      if (pow < 0 || g.nodes[pow].inputs[0] != x || !scalar_constant(g, g.nodes[pow].inputs[1], &e) || e != 3.0)
        continue;
      remove->insert(remove->end(), {scale, sum, mul, pow});
      return x;
    }
    return -1;
  };
  int fused[2] = {0, 0};  // erf, tanh
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const bool erf = is_op(g.nodes[i], "Erf");
    if (dead[i] || (!erf && !is_op(g.nodes[i], "Tanh"))) continue;
    std::vector<int> remove;
    const int x = erf ? erf_core(static_cast<int>(i), &remove) : tanh_core(static_cast<int>(i), &remove);
    if (x < 0) continue;
    remove.push_back(static_cast<int>(i));
    // erf(...) + 1, tanh(...) + 1
    int add = sole(g.nodes[i].outputs[0]);
    if (add < 0 || !is_op(g.nodes[add], "Add") || other_input_if_const(g, g.nodes[add], 1.0) != g.nodes[i].outputs[0]) continue;
    int a = g.nodes[add].outputs[0];
    // Two spellings of the remaining products: (x * a) * 0.5, or (x * 0.5) * a.
    int m1 = sole(a);
    if (m1 < 0 || !is_op(g.nodes[m1], "Mul")) continue;
    const auto& mul1 = g.nodes[m1];
    int other = mul1.inputs[0] == a ? mul1.inputs[1] : mul1.inputs[0];
    int out = -1;
    remove.insert(remove.end(), {add, m1});
    if (other == x) {
      int m2 = sole(mul1.outputs[0]);
      if (m2 < 0 || !is_op(g.nodes[m2], "Mul") || other_input_if_const(g, g.nodes[m2], 0.5) != mul1.outputs[0]) continue;
      out = g.nodes[m2].outputs[0];
      remove.push_back(m2);
    } else {
      int half = g.values[other].producer;
      if (half < 0 || dead[half] || !is_op(g.nodes[half], "Mul") || sole(other) != m1) continue;
      if (other_input_if_const(g, g.nodes[half], 0.5) != x) continue;
      out = mul1.outputs[0];
      remove.push_back(half);
    }
    // x feeds the pattern two or three times; other readers of x are fine (it is not removed).
    graph::Node gelu;
    gelu.name = g.nodes[i].name.empty() ? "gelu" : g.nodes[i].name + "/gelu";
    gelu.op_type = "Gelu";
    gelu.inputs = {x};
    gelu.outputs = {out};
    if (!erf) gelu.attrs["approximate"] = string_attr("tanh");
    if (!rewrite_fits(g, gelu, ctx)) continue;
    for (int r : remove) dead[r] = 1;
    // Reuse the Erf/Tanh slot so the node order stays topological.
    g.nodes[i] = gelu;
    dead[i] = 0;
    ++fused[erf ? 0 : 1];
  }
  if (fused[0] + fused[1]) {
    erase_nodes(g, dead);
    g.topo_sort();
    ctx.note("fuse_gelu: " + std::to_string(fused[0]) + " erf-GELU, " + std::to_string(fused[1]) +
             " tanh-GELU patterns -> Gelu");
  }
  return fused[0] + fused[1];
}

}  // namespace twinfer::passes
