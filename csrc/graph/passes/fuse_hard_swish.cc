#include "graph/passes/fuse_hard_swish.h"

#include <cmath>

#include "graph/passes/rewrite_check.h"
#include "graph/passes/rewrite_util.h"
#include "ops/kernel.h"

namespace twinfer::passes {

namespace {

bool near(double a, double b) { return std::fabs(a - b) <= 1e-6 * std::fabs(b); }

bool is_op(const graph::Node& n, const char* op) { return is_default_op(n, op); }

// For a binary node, the input that is not the scalar constant `c`; -1 if no match.
int other_input_if_const(const graph::Graph& g, const graph::Node& n, double c) {
  return passes::other_input_if_const(g, n, c, 1e-6);
}

// Whether Clip node n bounds to [0, 6]: constant inputs (opset 11 on) or
// attributes (before).
bool clips_to_relu6(const graph::Graph& g, const graph::Node& n) {
  double lo = -INFINITY, hi = INFINITY;
  if (n.inputs.size() > 1 && n.inputs[1] >= 0 && !scalar_constant(g, n.inputs[1], &lo)) return false;
  if (n.inputs.size() > 2 && n.inputs[2] >= 0 && !scalar_constant(g, n.inputs[2], &hi)) return false;
  if (n.has_attr("min")) lo = n.attr_float("min", 0.f);
  if (n.has_attr("max")) hi = n.attr_float("max", 0.f);
  return lo == 0.0 && hi == 6.0;
}

// The value a node `/ 6` or `* (1/6)` divides, if n is one.
int sixth_of(const graph::Graph& g, const graph::Node& n) {
  if (is_op(n, "Div")) {
    double v;
    return n.inputs.size() == 2 && scalar_constant(g, n.inputs[1], &v) && v == 6.0 ? n.inputs[0] : -1;
  }
  return is_op(n, "Mul") ? other_input_if_const(g, n, 1.0 / 6.0) : -1;
}

// For Mul node n reading `v`, its other input.
int other_factor(const graph::Node& n, int v) {
  if (!is_op(n, "Mul") || n.inputs.size() != 2) return -1;
  return n.inputs[0] == v ? n.inputs[1] : n.inputs[1] == v ? n.inputs[0] : -1;
}

}  // namespace

int fuse_hard_swish(graph::Graph& g, const PassContext& ctx) {
  if (!any_kernel_for("", "HardSwish", ctx.backend)) return 0;
  auto users = value_users(g);
  std::vector<char> dead(g.nodes.size(), 0);
  auto sole = [&](int v) -> int {
    if (v < 0 || users[v].size() != 1 || is_graph_output(g, v)) return -1;
    return dead[users[v][0]] ? -1 : users[v][0];
  };
  int fused = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (dead[i]) continue;
    const graph::Node& n = g.nodes[i];
    std::vector<int> remove = {static_cast<int>(i)};
    int x = -1, gate = -1;  // x, and the value in [0, 1] (or [0, 6]) x is multiplied by
    bool gate_is_sixth = false;  // the gate already divided by 6
    if (is_op(n, "HardSigmoid") && near(n.attr_float("alpha", 0.2f), 1.0 / 6.0) && n.attr_float("beta", 0.5f) == 0.5f) {
      x = n.inputs[0];
      gate = n.outputs[0];
      gate_is_sixth = true;
    } else if (is_op(n, "Clip") && clips_to_relu6(g, n)) {
      const int add = g.values[n.inputs[0]].producer;
      if (add < 0 || dead[add] || !is_op(g.nodes[add], "Add") || sole(n.inputs[0]) != static_cast<int>(i)) continue;
      x = other_input_if_const(g, g.nodes[add], 3.0);
      remove.push_back(add);
      gate = n.outputs[0];
      // Clip(x + 3, 0, 6) / 6 before the product
      const int d = sole(gate);
      if (d >= 0 && sixth_of(g, g.nodes[d]) == gate) {
        remove.push_back(d);
        gate = g.nodes[d].outputs[0];
        gate_is_sixth = true;
      }
    }
    if (x < 0) continue;
    const int mul = sole(gate);
    if (mul < 0 || other_factor(g.nodes[mul], gate) != x) continue;
    remove.push_back(mul);
    int out = g.nodes[mul].outputs[0];
    if (!gate_is_sixth) {  // (x * Clip(x + 3, 0, 6)) / 6
      const int d = sole(out);
      if (d < 0 || sixth_of(g, g.nodes[d]) != out) continue;
      remove.push_back(d);
      out = g.nodes[d].outputs[0];
    }
    graph::Node hs;
    hs.name = n.name.empty() ? "hard_swish" : n.name + "/hard_swish";
    hs.op_type = "HardSwish";
    hs.inputs = {x};
    hs.outputs = {out};
    if (!rewrite_fits(g, hs, ctx)) continue;
    for (int r : remove) dead[r] = 1;
    // In the slot of the pattern's last node, after every reader of x's
    // producer it replaces: the order stays topological.
    const int last = remove.back();
    g.nodes[last] = hs;
    dead[last] = 0;
    ++fused;
  }
  if (fused) {
    erase_nodes(g, dead);
    g.topo_sort();
    ctx.note("fuse_hard_swish: " + std::to_string(fused) + " spelled-out HardSwish patterns -> HardSwish");
  }
  return fused;
}

}  // namespace twinfer::passes
