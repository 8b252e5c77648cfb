#include "graph/passes/fuse_attention.h"

#include <cmath>

#include "graph/domains.h"
#include "graph/passes/rewrite_check.h"
#include "graph/passes/rewrite_util.h"
#include "ops/kernel.h"

namespace twinfer::passes {

namespace {

bool is_op(const graph::Node& n, const char* op) { return n.domain.empty() && n.op_type == op; }

Shape shape_of(const graph::Graph& g, int v) {
  if (v < 0) return {};
  const auto& val = g.values[v];
  if (!val.has_shape || !sym_shape_known(val.shape)) return {};
  return sym_shape_values(val.shape);
}

struct Matcher {
  graph::Graph& g;
  std::vector<std::vector<int>> users;
  std::vector<char> dead;

  // The node producing v when v is read by that one node alone (and is not a graph output).
  int sole_producer(int v, int reader) const {
    if (v < 0 || v >= static_cast<int>(users.size()) || is_graph_output(g, v) || users[v].size() != 1 || users[v][0] != reader) return -1;
    const int p = g.values[v].producer;
    return p >= 0 && !dead[p] ? p : -1;
  }
  // For Mul(x, c) / Mul(c, x) with a scalar constant: x and the factor.
  bool scaled_by(int node, int* x, double* factor) const {
    const graph::Node& n = g.nodes[node];
    if (!is_op(n, "Mul") || n.inputs.size() != 2) return false;
    for (int k = 0; k < 2; ++k)
      if (scalar_constant(g, n.inputs[1 - k], factor)) {
        *x = n.inputs[k];
        return true;
      }
    return false;
  }
};

}  // namespace

int fuse_attention(graph::Graph& g, const PassContext& ctx) {
  if (ctx.backend == Backend::kCPU || !any_kernel_for(kTwinferDomain, "Attention", ctx.backend)) return 0;
  Matcher m{g, value_users(g), std::vector<char>(g.nodes.size(), 0)};
  int fused = 0;
  for (size_t si = 0; si < g.nodes.size(); ++si) {
    const graph::Node& sm = g.nodes[si];
    if (m.dead[si] || !is_op(sm, "Softmax") || sm.inputs.empty() || sm.outputs.empty()) continue;
    const int sv = sm.inputs[0];
    const Shape ss = shape_of(g, sv);
    if (ss.size() != 4 || g.values[sv].dtype != DType::kFloat32) continue;
    const int64_t axis = sm.attr_int("axis", ctx.opset >= 13 ? -1 : 1);
    if (axis != -1 && axis != 3) continue;
    std::vector<int> remove = {static_cast<int>(si)};
    // The probabilities' reader: the MatMul with v, or Where(IsNaN(p), 0, p) first.
    int p = sm.outputs[0];
    if (is_graph_output(g, p)) continue;
    int mm2 = -1;
    if (m.users[p].size() == 1) {
      mm2 = m.users[p][0];
    } else if (m.users[p].size() == 2) {
      int isnan = -1, where = -1;
      for (int u : m.users[p]) {
        if (is_op(g.nodes[u], "IsNaN")) isnan = u;
        if (is_op(g.nodes[u], "Where")) where = u;
      }
      if (isnan < 0 || where < 0) continue;
      const graph::Node& w = g.nodes[where];
      double zero = 1;
      if (w.inputs.size() != 3 || w.inputs[0] != g.nodes[isnan].outputs[0] || w.inputs[2] != p ||
          !scalar_constant(g, w.inputs[1], &zero) || zero != 0.0 || m.users[w.inputs[0]].size() != 1 ||
          is_graph_output(g, w.inputs[0]) || is_graph_output(g, w.outputs[0]) || m.users[w.outputs[0]].size() != 1)
        continue;
      remove.push_back(isnan);
      remove.push_back(where);
      p = w.outputs[0];
      mm2 = m.users[p][0];
    } else {
      continue;
    }
    if (m.dead[mm2] || !is_op(g.nodes[mm2], "MatMul") || g.nodes[mm2].inputs[0] != p) continue;
    const int v = g.nodes[mm2].inputs[1], out = g.nodes[mm2].outputs[0];
    remove.push_back(mm2);
    // Scores: [Add(mask)] <- [Div / Mul by a constant] <- MatMul(q', k').
    int cur = m.sole_producer(sv, static_cast<int>(si));
    if (cur < 0) continue;
    int mask = -1;
    double scale = 1.0;
    // The scores' chain from `node`: [Div / Mul by a constant] then the MatMul;
    // its index (or -1), the scale factor, the scaling node (or -1).
    auto scores_from = [&](int node, double* factor, int* scaler) {
      *factor = 1.0;
      *scaler = -1;
      if (node >= 0 && (is_op(g.nodes[node], "Div") || is_op(g.nodes[node], "Mul"))) {
        const graph::Node& n = g.nodes[node];
        double c = 0;
        int x = -1;
        if (is_op(n, "Div") && scalar_constant(g, n.inputs[1], &c) && c != 0.0) *factor = 1.0 / c, x = n.inputs[0];
        else if (m.scaled_by(node, &x, &c)) *factor = c;
        else return -1;
        *scaler = node;
        node = m.sole_producer(x, node);
      }
      return node >= 0 && is_op(g.nodes[node], "MatMul") ? node : -1;
    };
    double factor = 1.0;
    int scaler = -1;
    if (is_op(g.nodes[cur], "Add")) {
      // Either operand may be the scores: the one whose chain reaches a MatMul.
      const graph::Node& add = g.nodes[cur];
      int found = -1;
      for (int k = 0; k < 2 && found < 0; ++k) {
        found = scores_from(m.sole_producer(add.inputs[k], cur), &factor, &scaler);
        if (found >= 0) mask = add.inputs[1 - k];
      }
      remove.push_back(cur);
      cur = found;
    } else {
      cur = scores_from(cur, &factor, &scaler);
    }
    scale *= factor;
    if (scaler >= 0) remove.push_back(scaler);
    if (cur < 0 || !is_op(g.nodes[cur], "MatMul")) continue;
    const int mm1 = cur;
    remove.push_back(mm1);
    // q' = q [* c1]; k' = Transpose(k) [* c2] (or any [B, H, D, Sk] value).
    int q = g.nodes[mm1].inputs[0], kt = g.nodes[mm1].inputs[1];
    double c = 0;
    int x = -1;
    int pq = m.sole_producer(q, mm1);
    if (pq >= 0 && m.scaled_by(pq, &x, &c)) {
      scale *= c;
      remove.push_back(pq);
      q = x;
    }
    int pk = m.sole_producer(kt, mm1);
    if (pk >= 0 && m.scaled_by(pk, &x, &c)) {
      scale *= c;
      remove.push_back(pk);
      kt = x;
      pk = m.sole_producer(kt, pk);
    }
    // k in [B, H, Sk, D]: the Transpose's input when its perm swaps the last two
    // axes of it, else a Transpose of k' added.
    const Shape qs = shape_of(g, q), kts = shape_of(g, kt), vs = shape_of(g, v), os = shape_of(g, out);
    if (qs.size() != 4 || kts.size() != 4 || vs.size() != 4 || os.size() != 4) continue;
    const int64_t B = qs[0], H = qs[1], Sq = qs[2], D = qs[3], Sk = kts[3];
    if (kts != Shape{B, H, D, Sk} || vs[0] != B || vs[1] != H || vs[2] != Sk || ss != Shape{B, H, Sq, Sk}) continue;
    if (g.values[q].dtype != DType::kFloat32 || g.values[v].dtype != DType::kFloat32) continue;
    if (mask >= 0) {
      const Shape ms = shape_of(g, mask);
      if (ms.empty() || ms.size() > 4 || g.values[mask].dtype != DType::kFloat32) continue;
    }
    int k = -1;
    if (pk >= 0 && is_op(g.nodes[pk], "Transpose")) {
      const std::vector<int64_t> perm = g.nodes[pk].attr_ints("perm");
      if (perm == std::vector<int64_t>{0, 1, 3, 2}) {
        k = g.nodes[pk].inputs[0];
        remove.push_back(pk);
      }
    }
    std::vector<graph::Node> added;
    if (k < 0) {
      k = add_value(g, g.values[kt].name + "/key");
      g.values[k].dtype = DType::kFloat32;
      g.values[k].has_shape = true;
      g.values[k].shape = sym_shape_from(Shape{B, H, Sk, D});
      added.push_back(transpose_node(g.nodes[mm1].name + "/key", kt, k, {0, 1, 3, 2}));
    }
    graph::Node att;
    att.name = g.nodes[mm1].name.empty() ? "attention" : g.nodes[mm1].name + "/attention";
    att.op_type = "Attention";
    att.domain = kTwinferDomain;
    graph::Attribute sc;
    sc.type = graph::Attribute::Type::kFloat;
    sc.f = static_cast<float>(scale);
    att.attrs["scale"] = sc;
    att.inputs = {q, k, v};
    if (mask >= 0) att.inputs.push_back(mask);
    att.outputs = {out};
    if (!(scale > 0.0) || !rewrite_fits(g, att, ctx)) continue;  // the CPU kernel scales q and k by sqrt(scale)
    for (int r : remove) m.dead[r] = 1;
    // The Attention takes the last MatMul's slot (its inputs all exist by then);
    // an added Transpose goes at the end and the sort below puts it in place.
    g.nodes[mm2] = att;
    m.dead[mm2] = 0;
    for (auto& t : added) {
      g.nodes.push_back(std::move(t));
      m.dead.push_back(0);
    }
    ++fused;
  }
  if (fused) {
    erase_nodes(g, m.dead);
    g.topo_sort();
    ctx.note("fuse_attention: " + std::to_string(fused) + " attention patterns -> com.twinfer::Attention");
  }
  return fused;
}

}  // namespace twinfer::passes
