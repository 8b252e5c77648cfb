#include "graph/passes/fuse.h"

#include "graph/domains.h"
#include "graph/passes/rewrite_util.h"
#include "ops/kernel.h"

namespace twinfer::passes {

namespace {

struct Matcher {
  graph::Graph& g;
  std::vector<std::vector<int>> users;
  std::vector<char> dead;

  explicit Matcher(graph::Graph& graph) : g(graph), users(value_users(graph)), dead(graph.nodes.size(), 0) {}

  // The single live node reading `v`, when v has exactly one reader and is not a graph output.
  graph::Node* sole_user(int v, int* index) {
    if (v < 0 || users[v].size() != 1 || is_graph_output(g, v)) return nullptr;
    int u = users[v][0];
    if (dead[u]) return nullptr;
    *index = u;
    return &g.nodes[u];
  }
  bool is_const(int v) const { return v >= 0 && g.values[v].is_constant(); }
};

bool is_default(const graph::Node& n, const char* op) { return n.domain.empty() && n.op_type == op; }

// Activation that follows `node_output`, if one can go into an epilogue.
// Returns the activation node index, or -1. Sets name and params.
int match_activation(Matcher& m, int value, std::string* name, std::vector<float>* params,
                     int* out_value, int* extra_dead) {
  *extra_dead = -1;
  // SiLU: value feeds exactly Sigmoid and Mul(value, sigmoid(value)).
  if (value >= 0 && m.users[value].size() == 2 && !is_graph_output(m.g, value)) {
    int a = m.users[value][0], b = m.users[value][1];
    for (int pass = 0; pass < 2; ++pass, std::swap(a, b)) {
      auto& sig = m.g.nodes[a];
      auto& mul = m.g.nodes[b];
      if (m.dead[a] || m.dead[b] || !is_default(sig, "Sigmoid") || !is_default(mul, "Mul")) continue;
      int s = sig.outputs[0];
      if (m.users[s].size() != 1 || m.users[s][0] != b || is_graph_output(m.g, s)) continue;
      if (!((mul.inputs[0] == value && mul.inputs[1] == s) || (mul.inputs[1] == value && mul.inputs[0] == s))) continue;
      *name = "Silu";
      params->clear();
      *out_value = mul.outputs[0];
      *extra_dead = a;
      return b;
    }
  }
  int idx;
  graph::Node* n = m.sole_user(value, &idx);
  if (!n || !n->domain.empty()) return -1;
  params->clear();
  const std::string& op = n->op_type;
  if (op == "Relu" || op == "Sigmoid" || op == "Tanh" || op == "HardSwish") {
    *name = op;
  } else if (op == "Gelu") {
    if (n->attr_string("approximate", "none") != "none") return -1;
    *name = op;
  } else if (op == "LeakyRelu") {
    *name = op;
    params->push_back(n->attr_float("alpha", 0.01f));
  } else if (op == "HardSigmoid") {
    *name = op;
    params->push_back(n->attr_float("alpha", 0.2f));
    params->push_back(n->attr_float("beta", 0.5f));
  } else if (op == "Clip") {
    // Bounds must be constants (opset >= 11 passes them as inputs).
    float lo = -3.4e38f, hi = 3.4e38f;
    if (n->inputs.size() > 1 && n->inputs[1] >= 0) {
      if (!m.is_const(n->inputs[1]) || m.g.values[n->inputs[1]].constant.dtype() != DType::kFloat32) return -1;
      lo = *m.g.values[n->inputs[1]].constant.data_as<float>();
    }
    if (n->inputs.size() > 2 && n->inputs[2] >= 0) {
      if (!m.is_const(n->inputs[2]) || m.g.values[n->inputs[2]].constant.dtype() != DType::kFloat32) return -1;
      hi = *m.g.values[n->inputs[2]].constant.data_as<float>();
    }
    if (n->has_attr("min")) lo = n->attr_float("min", lo);
    if (n->has_attr("max")) hi = n->attr_float("max", hi);
    *name = "Clip";
    params->push_back(lo);
    params->push_back(hi);
  } else {
    return -1;
  }
  *out_value = n->outputs[0];
  return idx;
}

void set_activation(graph::Node& n, const std::string& name, const std::vector<float>& params) {
  graph::Attribute a;
  a.type = graph::Attribute::Type::kString;
  a.s = name;
  n.attrs["activation"] = a;
  graph::Attribute p;
  p.type = graph::Attribute::Type::kFloats;
  p.floats = params;
  n.attrs["activation_params"] = p;
}

bool is_f32(const graph::Graph& g, int v) { return v >= 0 && g.values[v].dtype == DType::kFloat32; }

int fuse_conv(Matcher& m, const PassContext& ctx) {
  if (!any_kernel_for(kTwinferDomain, "Conv", ctx.backend)) return 0;
  int fused = 0;
  for (size_t i = 0; i < m.g.nodes.size(); ++i) {
    if (m.dead[i] || !is_default(m.g.nodes[i], "Conv") || !is_f32(m.g, m.g.nodes[i].outputs[0])) continue;
    int y = m.g.nodes[i].outputs[0];
    int residual = -1, add_idx = -1;
    int ui;
    graph::Node* add = m.sole_user(y, &ui);
    if (add && is_default(*add, "Add")) {
      int other = add->inputs[0] == y ? add->inputs[1] : add->inputs[0];
      const auto& ov = m.g.values[other];
      const auto& yv = m.g.values[y];
      // The residual must have exactly the conv output's shape (no broadcast).
      if (other != y && ov.has_shape && yv.has_shape && ov.shape.size() == yv.shape.size()) {
        bool same = true;
        for (size_t d = 0; d < ov.shape.size(); ++d) same &= ov.shape[d] == yv.shape[d];
        if (same && ov.dtype == DType::kFloat32) {
          residual = other;
          add_idx = ui;
        }
      }
    }
    int tail = add_idx >= 0 ? m.g.nodes[add_idx].outputs[0] : y;
    std::string act;
    std::vector<float> params;
    int out = tail, extra = -1;
    int act_idx = match_activation(m, tail, &act, &params, &out, &extra);
    if (add_idx < 0 && act_idx < 0) continue;
    graph::Node& conv = m.g.nodes[i];
    conv.domain = kTwinferDomain;
    set_activation(conv, act_idx >= 0 ? act : "", params);
    if (residual >= 0) {
      conv.inputs.resize(3, -1);
      conv.inputs.push_back(residual);
      m.dead[add_idx] = 1;
    }
    if (act_idx >= 0) {
      m.dead[act_idx] = 1;
      if (extra >= 0) m.dead[extra] = 1;
    }
    conv.outputs[0] = act_idx >= 0 ? out : tail;
    ++fused;
  }
  if (fused) ctx.note("fuse: " + std::to_string(fused) + " Conv [+Add] [+activation] -> com.twinfer::Conv");
  return fused;
}

int fuse_matmul_bias(Matcher& m, const PassContext& ctx) {
  if (!any_kernel_for(kTwinferDomain, "MatMul", ctx.backend)) return 0;
  int fused = 0;
  for (size_t i = 0; i < m.g.nodes.size(); ++i) {
    graph::Node& mm = m.g.nodes[i];
    if (m.dead[i] || !is_default(mm, "MatMul") || !is_f32(m.g, mm.outputs[0])) continue;
    if (!m.is_const(mm.inputs[1]) || m.g.values[mm.inputs[1]].constant.shape().size() != 2) continue;
    const int64_t n_out = m.g.values[mm.inputs[1]].constant.shape()[1];
    int ui;
    graph::Node* add = m.sole_user(mm.outputs[0], &ui);
    if (!add || !is_default(*add, "Add")) continue;
    int other = add->inputs[0] == mm.outputs[0] ? add->inputs[1] : add->inputs[0];
    if (!m.is_const(other)) continue;
    const Tensor& b = m.g.values[other].constant;
    if (b.dtype() != DType::kFloat32 || b.numel() != n_out || b.shape().empty() || b.shape().back() != n_out) continue;
    std::string act;
    std::vector<float> params;
    int out = add->outputs[0], extra = -1;
    int act_idx = match_activation(m, add->outputs[0], &act, &params, &out, &extra);
    mm.domain = kTwinferDomain;
    mm.inputs.push_back(other);
    set_activation(mm, act_idx >= 0 ? act : "", params);
    m.dead[ui] = 1;
    if (act_idx >= 0) {
      m.dead[act_idx] = 1;
      if (extra >= 0) m.dead[extra] = 1;
    }
    mm.outputs[0] = act_idx >= 0 ? out : m.g.nodes[ui].outputs[0];
    ++fused;
  }
  if (fused) ctx.note("fuse: " + std::to_string(fused) + " MatMul + bias [+activation] -> com.twinfer::MatMul");
  return fused;
}

int fuse_gemm_activation(Matcher& m, const PassContext& ctx) {
  if (!any_kernel_for(kTwinferDomain, "Gemm", ctx.backend)) return 0;
  int fused = 0;
  for (size_t i = 0; i < m.g.nodes.size(); ++i) {
    graph::Node& gm = m.g.nodes[i];
    if (m.dead[i] || !is_default(gm, "Gemm") || !is_f32(m.g, gm.outputs[0])) continue;
    std::string act;
    std::vector<float> params;
    int out = gm.outputs[0], extra = -1;
    int act_idx = match_activation(m, gm.outputs[0], &act, &params, &out, &extra);
    if (act_idx < 0) continue;
    gm.domain = kTwinferDomain;
    set_activation(gm, act, params);
    m.dead[act_idx] = 1;
    if (extra >= 0) m.dead[extra] = 1;
    gm.outputs[0] = out;
    ++fused;
  }
  if (fused) ctx.note("fuse: " + std::to_string(fused) + " Gemm + activation -> com.twinfer::Gemm");
  return fused;
}

}  // namespace

int fuse_all(graph::Graph& g, const PassContext& ctx) {
  if (!ctx.allow_fusion) return 0;
  int total = 0;
  {
    Matcher m(g);
    int n = fuse_conv(m, ctx);
    if (n) { erase_nodes(g, m.dead); g.topo_sort(); }
    total += n;
  }
  {
    Matcher m(g);
    int n = fuse_matmul_bias(m, ctx) ;
    n += fuse_gemm_activation(m, ctx);
    if (n) { erase_nodes(g, m.dead); g.topo_sort(); }
    total += n;
  }
  return total;
}

}  // namespace twinfer::passes
