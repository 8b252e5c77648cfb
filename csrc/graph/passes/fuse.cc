#include "graph/passes/fuse.h"

#include <initializer_list>

#include "graph/domains.h"
#include "graph/passes/rewrite_check.h"
#include "graph/passes/rewrite_util.h"
#include "ops/kernel.h"
#include "ops/quant/fp8_matmul.h"

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

// A float32 constant holding exactly one value (Clip's bounds).
bool scalar_f32(const Matcher& m, int v, float* out) {
  if (!m.is_const(v)) return false;
  const Tensor& t = m.g.values[v].constant;
  if (t.dtype() != DType::kFloat32 || t.numel() != 1) return false;
  *out = *t.data_as<float>();
  return true;
}

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
    // activation_params [1]: the tanh form (ops/nn/activation.h), oneDNN's gelu_tanh post-op.
    const std::string approximate = n->attr_string("approximate", "none");
    if (approximate != "none" && approximate != "tanh") return -1;
    *name = op;
    if (approximate == "tanh") params->push_back(1.f);
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
      if (!scalar_f32(m, n->inputs[1], &lo)) return -1;
    }
    if (n->inputs.size() > 2 && n->inputs[2] >= 0) {
      if (!scalar_f32(m, n->inputs[2], &hi)) return -1;
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

// Node i becomes the fused `f`; the nodes it absorbed (-1: none) go.
void replace_fused(Matcher& m, size_t i, graph::Node f, std::initializer_list<int> absorbed) {
  m.g.nodes[i] = std::move(f);
  for (int a : absorbed)
    if (a >= 0) m.dead[a] = 1;
}

int fuse_conv(Matcher& m, const PassContext& ctx) {
  if (!any_kernel_for(kTwinferDomain, "Conv", ctx.backend)) return 0;
  int fused = 0, kept = 0;
  for (size_t i = 0; i < m.g.nodes.size(); ++i) {
    if (m.dead[i] || !is_default(m.g.nodes[i], "Conv") || !is_f32(m.g, m.g.nodes[i].outputs[0])) continue;
    int y = m.g.nodes[i].outputs[0];
    int residual = -1, add_idx = -1;
    int ui;
    graph::Node* add = m.sole_user(y, &ui);
    if (add && is_default(*add, "Add") && add->inputs.size() == 2) {
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
    graph::Node f = m.g.nodes[i];
    f.domain = kTwinferDomain;
    set_activation(f, act_idx >= 0 ? act : "", params);
    if (residual >= 0) {
      f.inputs.resize(3, -1);
      f.inputs.push_back(residual);
    }
    f.outputs[0] = act_idx >= 0 ? out : tail;
    if (!rewrite_fits(m.g, f, ctx)) {
      ++kept;
      continue;
    }
    replace_fused(m, i, std::move(f), {add_idx, act_idx, extra});
    ++fused;
  }
  if (fused) ctx.note("fuse: " + std::to_string(fused) + " Conv [+Add] [+activation] -> com.twinfer::Conv");
  if (kept) ctx.note("fuse: " + std::to_string(kept) + " Conv patterns left unfused (the fused op would not fit)");
  return fused;
}

// The bias of y = x @ W + b as the fused op's [N]: b may be any constant of N
// floats laid along its last dim ([N], [1, N], [1, 1, N] from jax2tf...), as
// long as it does not raise y's rank (Add would broadcast y up to b's rank).
// Returns the value id to feed (a reshaped copy when b is not 1-D), or -1.
int bias_as_vector(Matcher& m, int b, int64_t n_out, int y) {
  if (!m.is_const(b)) return -1;
  const Tensor& t = m.g.values[b].constant;
  if (t.dtype() != DType::kFloat32 || t.numel() != n_out || t.shape().empty() || t.shape().back() != n_out) return -1;
  if (t.shape().size() == 1) return b;
  const auto& yv = m.g.values[y];
  if (!yv.has_shape || t.shape().size() > yv.shape.size()) return -1;
  return add_constant(m.g, m.g.values[b].name + "/as_vector", t.reshaped({n_out}));
}

int fuse_matmul_bias(Matcher& m, const PassContext& ctx) {
  if (!any_kernel_for(kTwinferDomain, "MatMul", ctx.backend)) return 0;
  int fused = 0, kept = 0;
  for (size_t i = 0; i < m.g.nodes.size(); ++i) {
    const graph::Node& mm = m.g.nodes[i];
    if (m.dead[i] || !is_default(mm, "MatMul") || mm.inputs.size() != 2 || !is_f32(m.g, mm.outputs[0])) continue;
    if (!m.is_const(mm.inputs[1]) || m.g.values[mm.inputs[1]].constant.shape().size() != 2) continue;
    const int64_t n_out = m.g.values[mm.inputs[1]].constant.shape()[1];
    int ui;
    graph::Node* add = m.sole_user(mm.outputs[0], &ui);
    if (!add || !is_default(*add, "Add") || add->inputs.size() != 2) continue;
    const int y = mm.outputs[0];
    const int other = add->inputs[0] == y ? add->inputs[1] : add->inputs[0];
    const int add_out = add->outputs[0];
    const int bias = other == y ? -1 : bias_as_vector(m, other, n_out, y);
    if (bias < 0) continue;
    std::string act;
    std::vector<float> params;
    int out = add_out, extra = -1;
    int act_idx = match_activation(m, add_out, &act, &params, &out, &extra);
    graph::Node f = m.g.nodes[i];
    f.domain = kTwinferDomain;
    f.inputs.push_back(bias);
    set_activation(f, act_idx >= 0 ? act : "", params);
    f.outputs[0] = act_idx >= 0 ? out : add_out;
    if (!rewrite_fits(m.g, f, ctx)) {
      ++kept;
      continue;
    }
    replace_fused(m, i, std::move(f), {ui, act_idx, extra});
    ++fused;
  }
  if (fused) ctx.note("fuse: " + std::to_string(fused) + " MatMul + bias [+activation] -> com.twinfer::MatMul");
  if (kept) ctx.note("fuse: " + std::to_string(kept) + " MatMul + bias patterns left unfused (the fused op would not fit)");
  return fused;
}

int fuse_gemm_activation(Matcher& m, const PassContext& ctx) {
  if (!any_kernel_for(kTwinferDomain, "Gemm", ctx.backend)) return 0;
  int fused = 0, kept = 0;
  for (size_t i = 0; i < m.g.nodes.size(); ++i) {
    const graph::Node& gm = m.g.nodes[i];
    if (m.dead[i] || !is_default(gm, "Gemm") || !is_f32(m.g, gm.outputs[0])) continue;
    std::string act;
    std::vector<float> params;
    int out = gm.outputs[0], extra = -1;
    int act_idx = match_activation(m, gm.outputs[0], &act, &params, &out, &extra);
    if (act_idx < 0) continue;
    graph::Node f = gm;
    f.domain = kTwinferDomain;
    set_activation(f, act, params);
    f.outputs[0] = out;
    if (!rewrite_fits(m.g, f, ctx)) {
      ++kept;
      continue;
    }
    replace_fused(m, i, std::move(f), {act_idx, extra});
    ++fused;
  }
  if (fused) ctx.note("fuse: " + std::to_string(fused) + " Gemm + activation -> com.twinfer::Gemm");
  if (kept) ctx.note("fuse: " + std::to_string(kept) + " Gemm + activation patterns left unfused (the fused op would not fit)");
  return fused;
}

// com.twinfer::FP8MatMul, made from an FP8 QDQ model before fusion
// (fp8_gemm.h): the Add of a constant bias and the activation after it go
// into its epilogue, as they go into MatMul's.
int fuse_fp8_epilogue(Matcher& m, const PassContext& ctx) {
  int fused = 0;
  for (size_t i = 0; i < m.g.nodes.size(); ++i) {
    const graph::Node& mm = m.g.nodes[i];
    if (m.dead[i] || mm.domain != kTwinferDomain || mm.op_type != quant::kFP8MatMulOp || mm.has_attr("activation") ||
        mm.inputs.size() < quant::kF8Bias || !m.is_const(mm.inputs[quant::kF8W]) || !is_f32(m.g, mm.outputs[0]))
      continue;
    graph::Node f = mm;
    const int64_t n_out = m.g.values[f.inputs[quant::kF8W]].constant.shape()[0];
    int tail = f.outputs[0], add_idx = -1;
    if (f.inputs.size() == quant::kF8Bias || f.inputs[quant::kF8Bias] < 0) {
      int ui;
      graph::Node* add = m.sole_user(tail, &ui);
      if (add && is_default(*add, "Add") && add->inputs.size() == 2) {
        const int other = add->inputs[0] == tail ? add->inputs[1] : add->inputs[0];
        const int bias = other == tail ? -1 : bias_as_vector(m, other, n_out, tail);
        if (bias >= 0) {
          f.inputs.resize(quant::kF8Bias);
          f.inputs.push_back(bias);
          add_idx = ui;
          tail = m.g.nodes[ui].outputs[0];
        }
      }
    }
    std::string act;
    std::vector<float> params;
    int out = tail, extra = -1;
    const int act_idx = match_activation(m, tail, &act, &params, &out, &extra);
    if (add_idx < 0 && act_idx < 0) continue;
    set_activation(f, act_idx >= 0 ? act : "", params);
    f.outputs[0] = act_idx >= 0 ? out : tail;
    if (!rewrite_fits(m.g, f, ctx)) continue;
    replace_fused(m, i, std::move(f), {add_idx, act_idx, extra});
    ++fused;
  }
  if (fused) ctx.note("fuse: " + std::to_string(fused) + " FP8MatMul + bias [+activation]");
  return fused;
}

}  // namespace

// x * sigmoid(x) that no GEMM or convolution took into its epilogue (after
// a normalisation, in UNets and EfficientNets' squeeze-excite) as one Swish
// (alpha 1): one pass over the data instead of two, one vectorised loop
// (ops/elementwise/logistic_fast.cc). Host plans only: a device plan fuses
// the pair, with the elementwise ops around it, into one chain.
int fuse_silu(Matcher& m, const PassContext& ctx) {
  if (ctx.on_device || !any_kernel_for("", "Swish", ctx.backend)) return 0;
  int fused = 0;
  for (size_t i = 0; i < m.g.nodes.size(); ++i) {
    const graph::Node& sig = m.g.nodes[i];
    if (m.dead[i] || !is_default(sig, "Sigmoid") || sig.outputs.empty()) continue;
    const int x = sig.inputs[0], s = sig.outputs[0];
    int mi;
    graph::Node* mul = m.sole_user(s, &mi);
    if (!mul || !is_default(*mul, "Mul") || mul->inputs.size() != 2) continue;
    if (!((mul->inputs[0] == x && mul->inputs[1] == s) || (mul->inputs[1] == x && mul->inputs[0] == s))) continue;
    graph::Node swish;
    swish.name = mul->name;
    swish.op_type = "Swish";
    swish.inputs = {x};
    swish.outputs = mul->outputs;
    graph::Attribute alpha;
    alpha.type = graph::Attribute::Type::kFloat;
    alpha.f = 1.f;
    swish.attrs["alpha"] = alpha;
    replace_fused(m, static_cast<size_t>(mi), std::move(swish), {static_cast<int>(i)});
    ++fused;
  }
  return fused;
}

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
    n += fuse_fp8_epilogue(m, ctx);
    if (n) { erase_nodes(g, m.dead); g.topo_sort(); }
    total += n;
  }
  {
    Matcher m(g);
    int n = fuse_silu(m, ctx);
    if (n) { erase_nodes(g, m.dead); g.topo_sort(); }
    total += n;
  }
  return total;
}

}  // namespace twinfer::passes
