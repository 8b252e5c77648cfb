#include "graph/passes/softmax_chain.h"

#include "core/half.h"
#include "graph/passes/rewrite_util.h"

namespace twinfer::passes {

namespace {

bool is_op(const graph::Node& n, const char* op) { return n.domain.empty() && n.op_type == op; }

bool is_16_bit(DType t) { return t == DType::kFloat16 || t == DType::kBFloat16; }

// A one-element float constant of any width (a float16 model's scale is float16).
bool scalar_value(const graph::Graph& g, int v, double* out) {
  if (scalar_constant(g, v, out)) return true;
  if (v < 0 || !g.values[v].is_constant()) return false;
  const Tensor& t = g.values[v].constant;
  if (t.numel() != 1) return false;
  if (t.dtype() == DType::kFloat16) *out = half_to_float(*static_cast<const uint16_t*>(t.data()));
  else if (t.dtype() == DType::kBFloat16) *out = bf16_to_float(*static_cast<const uint16_t*>(t.data()));
  else return false;
  return true;
}

struct Walk {
  const graph::Graph& g;
  const std::vector<std::vector<int>>& users;
  const std::vector<char>& dead;

  int sole_producer(int v, int reader) const { return passes::sole_producer(g, users, dead, v, reader); }
  // For Mul(x, c) / Mul(c, x) with a scalar constant: x and the factor.
  bool scaled_by(int node, int* x, double* factor) const {
    const graph::Node& n = g.nodes[node];
    if (!is_op(n, "Mul") || n.inputs.size() != 2) return false;
    for (int k = 0; k < 2; ++k)
      if (scalar_value(g, n.inputs[1 - k], factor)) {
        *x = n.inputs[k];
        return true;
      }
    return false;
  }
  // From `node` (the scores' producer): [Div / Mul by a constant] then the
  // MatMul; its index (or -1), the factor and the scaling node (or -1).
  int scores_from(int node, double* factor, int* scaler) const {
    *factor = 1.0;
    *scaler = -1;
    if (node >= 0 && (is_op(g.nodes[node], "Div") || is_op(g.nodes[node], "Mul"))) {
      const graph::Node& n = g.nodes[node];
      double c = 0;
      int x = -1;
      if (is_op(n, "Div") && n.inputs.size() == 2 && scalar_value(g, n.inputs[1], &c) && c != 0.0)
        *factor = 1.0 / c, x = n.inputs[0];
      else if (scaled_by(node, &x, &c))
        *factor = c;
      else
        return -1;
      *scaler = node;
      node = sole_producer(x, node);
    }
    return node >= 0 && is_op(g.nodes[node], "MatMul") ? node : -1;
  }
};

}  // namespace

int sole_producer(const graph::Graph& g, const std::vector<std::vector<int>>& users, const std::vector<char>& dead,
                  int v, int reader) {
  if (v < 0 || v >= static_cast<int>(users.size()) || is_graph_output(g, v) || users[v].size() != 1 ||
      users[v][0] != reader)
    return -1;
  const int p = g.values[v].producer;
  return p >= 0 && !dead[p] ? p : -1;
}

std::vector<int> SoftmaxChain::between() const {
  std::vector<int> out;
  for (int n : {q_mul, k_mul, scaler, mask_add, cast_in, softmax, guard_isnan, guard_where, cast_out})
    if (n >= 0) out.push_back(n);
  return out;
}

bool match_softmax_chain(const graph::Graph& g, const std::vector<std::vector<int>>& users,
                         const std::vector<char>& dead, int opset, int si, SoftmaxChain* out, bool sixteen_bit) {
  const Walk w{g, users, dead};
  const graph::Node& sm = g.nodes[si];
  if (dead[si] || !is_op(sm, "Softmax") || sm.inputs.empty() || sm.outputs.empty()) return false;
  const int sv = sm.inputs[0];
  const DType type = g.values[sv].dtype;
  if (!(type == DType::kFloat32 || (sixteen_bit && is_16_bit(type))) || !g.values[sv].has_shape) return false;
  const int64_t rank = static_cast<int64_t>(g.values[sv].shape.size());
  const int64_t axis = sm.attr_int("axis", opset >= 13 ? -1 : 1);
  if (rank < 2 || (axis != -1 && axis != rank - 1)) return false;
  SoftmaxChain c;
  c.softmax = si;
  // The probabilities: p itself, or Where(IsNaN(p), 0, p) when p's readers are those two.
  int p = sm.outputs[0];
  if (is_graph_output(g, p)) return false;
  c.probs = p;
  if (users[p].size() == 2) {
    int isnan = -1, where = -1;
    for (int u : users[p]) {
      if (is_op(g.nodes[u], "IsNaN")) isnan = u;
      if (is_op(g.nodes[u], "Where")) where = u;
    }
    if (isnan >= 0 && where >= 0 && !dead[isnan] && !dead[where]) {
      const graph::Node& wn = g.nodes[where];
      double zero = 1;
      if (wn.inputs.size() == 3 && wn.inputs[0] == g.nodes[isnan].outputs[0] && wn.inputs[2] == p &&
          scalar_value(g, wn.inputs[1], &zero) && zero == 0.0 && users[wn.inputs[0]].size() == 1 &&
          !is_graph_output(g, wn.inputs[0]) && g.values[wn.outputs[0]].dtype == type) {
        c.guard_isnan = isnan;
        c.guard_where = where;
        c.probs = wn.outputs[0];
      }
    }
  }
  // A float32 softmax of 16-bit scores: Cast(s, float32) in, Cast(p, s's type) out.
  int cur = w.sole_producer(sv, si);
  if (cur < 0) return false;
  if (sixteen_bit && type == DType::kFloat32 && is_op(g.nodes[cur], "Cast") && !g.nodes[cur].inputs.empty()) {
    const int s16 = g.nodes[cur].inputs[0];
    const DType narrow = g.values[s16].dtype;
    const int back = is_16_bit(narrow) && !is_graph_output(g, c.probs) && users[c.probs].size() == 1
                         ? users[c.probs][0] : -1;
    if (back < 0 || dead[back] || !is_op(g.nodes[back], "Cast") ||
        g.nodes[back].attr_int("to", 0) != dtype_to_onnx(narrow) || g.nodes[back].outputs.empty())
      return false;
    c.cast_in = cur;
    c.cast_out = back;
    c.probs = g.nodes[back].outputs[0];
    cur = w.sole_producer(s16, c.cast_in);
    if (cur < 0) return false;
  }
  // Scores: [Add(mask)] <- [Div / Mul by a constant] <- MatMul(q', k').
  double factor = 1.0;
  int mm = -1;
  if (is_op(g.nodes[cur], "Add")) {
    // Either operand may be the scores: the one whose chain reaches a MatMul.
    const graph::Node& add = g.nodes[cur];
    if (add.inputs.size() != 2) return false;
    for (int k = 0; k < 2 && mm < 0; ++k) {
      mm = w.scores_from(w.sole_producer(add.inputs[k], cur), &factor, &c.scaler);
      if (mm >= 0) c.mask = add.inputs[1 - k];
    }
    c.mask_add = cur;
  } else {
    mm = w.scores_from(cur, &factor, &c.scaler);
  }
  if (mm < 0 || g.nodes[mm].inputs.size() != 2) return false;
  c.scale = factor;
  c.scores_matmul = mm;
  // q' = q [* c1]; k' = k [* c2].
  c.q = g.nodes[mm].inputs[0];
  c.k = g.nodes[mm].inputs[1];
  double f = 0;
  int x = -1;
  const int pq = w.sole_producer(c.q, mm);
  if (pq >= 0 && w.scaled_by(pq, &x, &f)) {
    c.scale *= f;
    c.q_mul = pq;
    c.q = x;
  }
  const int pk = w.sole_producer(c.k, mm);
  if (pk >= 0 && w.scaled_by(pk, &x, &f)) {
    c.scale *= f;
    c.k_mul = pk;
    c.k = x;
  }
  *out = c;
  return true;
}

}  // namespace twinfer::passes
