#include "graph/passes/fuse_qdq.h"

#include <cmath>
#include <limits>

#include "graph/domains.h"
#include "graph/passes/qdq_util.h"
#include "graph/passes/rewrite_check.h"
#include "graph/passes/rewrite_util.h"
#include "ops/kernel.h"
#include "ops/quant/qlinear_fused.h"
#include "ops/quant/token_qdq.h"

namespace twinfer::passes {

namespace {

using graph::Graph;
using graph::Node;

bool is_default(const Node& n, const char* op) { return n.domain.empty() && n.op_type == op; }
bool is_q8(DType t) { return t == DType::kInt8 || t == DType::kUInt8; }

int64_t read_int(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kInt8: return t.data_as<int8_t>()[i];
    case DType::kUInt8: return t.data_as<uint8_t>()[i];
    case DType::kInt32: return t.data_as<int32_t>()[i];
    default: return 0;
  }
}

struct Rewriter {
  Graph& g;
  const PassContext& ctx;
  std::vector<std::vector<int>> users;
  std::vector<char> dead;
  std::vector<Node> added;

  Rewriter(Graph& graph, const PassContext& c)
      : g(graph), ctx(c), users(value_users(graph)), dead(graph.nodes.size(), 0) {}

  const Tensor* constant(int v) const { return constant_behind_identity(g, v); }
  int behind_identity(int v) const { return passes::behind_identity(g, v); }

  // The DequantizeLinear producing v (float32 out, constant scale and zero
  // point, no blocks), or nullptr.
  const Node* dequantize_of(int v) const {
    if (v < 0 || g.values[v].dtype != DType::kFloat32) return nullptr;
    const int p = g.values[v].producer;
    if (p < 0 || dead[p]) return nullptr;
    const Node& n = g.nodes[p];
    if (!is_default(n, "DequantizeLinear") || n.inputs.size() < 2) return nullptr;
    if ((ctx.opset >= 21 && n.attr_int("block_size", 0) != 0)) return nullptr;
    const Tensor* s = constant(n.inputs[1]);
    if (!s || s->dtype() != DType::kFloat32) return nullptr;
    if (n.inputs.size() > 2 && n.inputs[2] >= 0 && !constant(n.inputs[2])) return nullptr;
    return &n;
  }
  // The com.twinfer::TokenQDQ producing v (per-token dynamic int8), or nullptr.
  const Node* token_qdq_of(int v) const {
    if (v < 0 || g.values[v].dtype != DType::kFloat32) return nullptr;
    const int p = g.values[v].producer;
    if (p < 0 || dead[p]) return nullptr;
    const Node& n = g.nodes[p];
    if (n.domain != kTwinferDomain || n.op_type != quant::kTokenQDQOp || n.inputs.size() != 1 || n.inputs[0] < 0)
      return nullptr;
    return &n;
  }
  // Whether v is Mul(a, c) with c a float32 constant of one value or one
  // per channel (k, along the last axis) that broadcasts a to no other
  // shape: the smoothing factor smooth_activations.cc puts in front of a
  // per-token quantization when no LayerNormalization can take it. Then *a
  // is the Mul's other input and *factors the k factors.
  bool smoothing_mul_of(int v, int64_t k, int* a, std::vector<float>* factors) const {
    const int p = v >= 0 ? g.values[v].producer : -1;
    if (p < 0 || dead[p] || !is_default(g.nodes[p], "Mul") || g.nodes[p].inputs.size() != 2) return false;
    const Node& m = g.nodes[p];
    for (int side = 0; side < 2; ++side) {
      const int x = m.inputs[side], c = m.inputs[1 - side];
      if (x < 0 || c < 0 || constant(x) || !constant(c)) continue;
      const auto& xv = g.values[x];
      if (xv.dtype != DType::kFloat32 || !xv.has_shape || xv.shape.empty() ||
          constant(c)->shape().size() > xv.shape.size())
        continue;
      if (!channel_vector(c, k, factors)) continue;
      *a = x;
      return true;
    }
    return false;
  }
  int64_t dq_axis(const Node& n, size_t rank) const {
    int64_t a = ctx.opset >= 13 ? n.attr_int("axis", 1) : 1;
    return a < 0 ? a + static_cast<int64_t>(rank) : a;
  }
  const Tensor* dq_zero(const Node& n) const { return n.inputs.size() > 2 ? constant(n.inputs[2]) : nullptr; }

  // The single live reader of v (v not a graph output), or -1.
  int sole_user(int v) const {
    if (v < 0 || users[v].size() != 1 || is_graph_output(g, v) || dead[users[v][0]]) return -1;
    return users[v][0];
  }

  int add_constant(const std::string& name, Tensor t) { return passes::add_constant(g, name, std::move(t)); }

  // A per-channel float vector of `channels` values from v: a float32
  // constant (one value or `channels`, laid out along the last dim), or
  // DequantizeLinear of an integer constant (ORT's int32 bias).
  bool channel_vector(int v, int64_t channels, std::vector<float>* out) const {
    auto fits = [&](const Shape& s, int64_t n) {
      if (n == 1) return true;
      if (n != channels || s.empty() || s.back() != channels) return false;
      for (size_t d = 0; d + 1 < s.size(); ++d)
        if (s[d] != 1) return false;
      return true;
    };
    if (const Tensor* t = constant(v)) {
      if (t->dtype() != DType::kFloat32 || !fits(t->shape(), t->numel())) return false;
      const float* p = t->data_as<float>();
      out->resize(static_cast<size_t>(channels));
      for (int64_t c = 0; c < channels; ++c) (*out)[c] = p[t->numel() == 1 ? 0 : c];
      return true;
    }
    const Node* dq = dequantize_of(behind_identity(v));  // a shared bias reaches later layers via Identity
    if (!dq) return false;
    const Tensor* q = constant(dq->inputs[0]);
    const Tensor& s = *constant(dq->inputs[1]);
    const Tensor* z = dq_zero(*dq);
    if (!q || (q->dtype() != DType::kInt32 && !is_q8(q->dtype())) || !fits(q->shape(), q->numel())) return false;
    if (s.numel() != 1 && (s.numel() != q->numel() || dq_axis(*dq, q->shape().size()) != int64_t(q->shape().size()) - 1))
      return false;
    if (z && z->numel() != s.numel()) return false;
    out->resize(static_cast<size_t>(channels));
    for (int64_t c = 0; c < channels; ++c) {
      const int64_t i = q->numel() == 1 ? 0 : c, si = s.numel() == 1 ? 0 : i;
      const double zero = z ? static_cast<double>(read_int(*z, si)) : 0.0;
      (*out)[c] = static_cast<float>((static_cast<double>(read_int(*q, i)) - zero) * s.data_as<float>()[si]);
    }
    return true;
  }

  // Activation node reading v that a oneDNN eltwise post-op can apply.
  int activation_after(int v, std::string* name, std::vector<float>* params) const {
    const int u = sole_user(v);
    if (u < 0) return -1;
    const Node& n = g.nodes[u];
    if (!n.domain.empty()) return -1;
    params->clear();
    const std::string& op = n.op_type;
    if (op == "Relu" || op == "Sigmoid" || op == "Tanh" || op == "HardSwish") {
      *name = op;
    } else if (op == "Gelu" && n.attr_string("approximate", "none") == "none") {
      *name = op;
    } else if (op == "LeakyRelu") {
      *name = op;
      params->push_back(n.attr_float("alpha", 0.01f));
    } else if (op == "Clip") {
      float lo = -std::numeric_limits<float>::infinity(), hi = std::numeric_limits<float>::infinity();
      for (size_t k = 1; k < 3 && k < n.inputs.size(); ++k) {
        if (n.inputs[k] < 0) continue;
        const Tensor* t = constant(n.inputs[k]);
        if (!t || t->dtype() != DType::kFloat32 || t->numel() != 1) return -1;
        (k == 1 ? lo : hi) = *t->data_as<float>();
      }
      if (n.has_attr("min")) lo = n.attr_float("min", lo);
      if (n.has_attr("max")) hi = n.attr_float("max", hi);
      *name = op;
      *params = {lo, hi};
    } else {
      return -1;
    }
    return u;
  }

  // When every reader of v is a QuantizeLinear with one and the same
  // constant scale / zero point: their indices (first one's output is kept).
  std::vector<int> quantizers_of(int v) const {
    if (v < 0 || users[v].empty() || is_graph_output(g, v)) return {};
    float scale = 0.f;
    int64_t zero = 0;
    DType type = DType::kUndefined;
    for (size_t k = 0; k < users[v].size(); ++k) {
      const int u = users[v][k];
      const Node& n = g.nodes[u];
      if (dead[u] || !is_default(n, "QuantizeLinear") || n.inputs[0] != v || n.inputs.size() < 3) return {};
      if (ctx.opset >= 23 && n.attr_int("precision", 0) != 0) return {};
      const Tensor* s = constant(n.inputs[1]);
      const Tensor* z = constant(n.inputs[2]);
      if (!s || !z || s->dtype() != DType::kFloat32 || s->numel() != 1 || z->numel() != 1 || !is_q8(z->dtype()))
        return {};
      const float sv = *s->data_as<float>();
      const int64_t zv = read_int(*z, 0);
      if (!(sv > 0.f) || !std::isfinite(sv)) return {};
      if (k == 0) {
        scale = sv;
        zero = zv;
        type = z->dtype();
      } else if (sv != scale || zv != zero || z->dtype() != type) {
        return {};
      }
    }
    return users[v];
  }

  bool fuse(size_t i, int* quantized_out) {
    const Node& n = g.nodes[i];
    const bool conv = is_default(n, "Conv"), gemm = is_default(n, "Gemm"), matmul = is_default(n, "MatMul");
    if (!(conv || gemm || matmul) || n.inputs.size() < 2 || n.outputs.empty()) return false;
    if (g.values[n.outputs[0]].dtype != DType::kFloat32) return false;
    // Activation: uint8/int8 per tensor, or float32 quantized per token
    // inside the kernel (TokenQDQ; MatMul/Gemm only).
    const Node* dx = dequantize_of(n.inputs[0]);
    const Node* tx = dx || conv ? nullptr : token_qdq_of(n.inputs[0]);
    if (!dx && !tx) return false;
    const int xq = dx ? dx->inputs[0] : tx->inputs[0];
    const auto& xv = g.values[xq];
    const Tensor* xz = dx ? dq_zero(*dx) : nullptr;
    if (dx) {
      const Tensor* xs = constant(dx->inputs[1]);
      if (!is_q8(xv.dtype) || xs->numel() != 1 || (xz && (xz->numel() != 1 || xz->dtype() != xv.dtype))) return false;
    } else if (xv.dtype != DType::kFloat32) {
      return false;
    }
    // Before the first constant folding a Reshape's target may be unknown:
    // then x's rank is too, and the kernel checks it once shapes are concrete.
    const size_t xrank = xv.has_shape ? xv.shape.size() : 0;
    // Weights: constant int8, per tensor or per output channel, zero points 0.
    const Node* dw = dequantize_of(n.inputs[1]);
    if (!dw) return false;
    const Tensor* wq = constant(dw->inputs[0]);
    if (!wq || wq->dtype() != DType::kInt8) return false;
    const Shape& ws = wq->shape();
    bool trans_b = false;
    int64_t channels = 0, out_axis = 0;
    float alpha = 1.f, beta = 1.f;
    if (conv) {
      if (ws.size() < 3 || ws.size() > 5 || (xv.has_shape && ws.size() != xrank)) return false;
      channels = ws[0];
    } else {
      if (ws.size() != 2 || (xv.has_shape && xrank < 1)) return false;
      if (gemm) {
        if (n.attr_int("transA", 0) != 0 || (xv.has_shape && xrank != 2)) return false;
        trans_b = n.attr_int("transB", 0) != 0;
        alpha = n.attr_float("alpha", 1.f);
        beta = n.attr_float("beta", 1.f);
      }
      out_axis = trans_b ? 0 : 1;
      channels = ws[out_axis];
    }
    const Tensor wsc = *constant(dw->inputs[1]);  // a handle: add_constant below may move g.values
    if (wsc.numel() != 1 && (wsc.numel() != channels || dq_axis(*dw, ws.size()) != out_axis)) return false;
    if (const Tensor* wz = dq_zero(*dw)) {
      if (wz->dtype() != DType::kInt8 || wz->numel() != wsc.numel()) return false;
      for (int64_t k = 0; k < wz->numel(); ++k)
        if (read_int(*wz, k) != 0) return false;
    }
    // Bias: the node's own (Conv B, Gemm C) or a following Add.
    std::vector<float> bias;
    std::vector<int> tail_dead;
    int tail = n.outputs[0];
    const int bias_in = (conv || gemm) && n.inputs.size() > 2 ? n.inputs[2] : -1;
    if (bias_in >= 0) {
      if (!channel_vector(bias_in, channels, &bias)) return false;
      if (gemm && beta != 1.f)
        for (float& b : bias) b *= beta;
    } else if (matmul) {
      const int u = sole_user(tail);
      if (u >= 0 && is_default(g.nodes[u], "Add")) {
        const Node& add = g.nodes[u];
        const int other = add.inputs[0] == tail ? add.inputs[1] : add.inputs[0];
        const auto& ov = g.values[other];
        // The bias must not broadcast y to a higher rank.
        const bool rank_ok = ov.has_shape && (ov.shape.size() <= 1 || (xv.has_shape && ov.shape.size() <= xrank));
        if (other != tail && rank_ok && channel_vector(other, channels, &bias)) {
          tail_dead.push_back(u);
          tail = add.outputs[0];
        }
      }
    }
    std::string act;
    std::vector<float> act_params;
    const int a = activation_after(tail, &act, &act_params);
    if (a >= 0) {
      tail_dead.push_back(a);
      tail = g.nodes[a].outputs[0];
    }
    const std::vector<int> quants = quantizers_of(tail);

    Node f;
    f.name = n.name;
    f.domain = kTwinferDomain;
    f.op_type = conv ? quant::kQConvOp : quant::kQMatMulOp;
    if (conv) f.attrs = n.attrs;
    else if (trans_b) f.attrs["trans_b"] = int_attr(1);
    graph::Attribute an;
    an.type = graph::Attribute::Type::kString;
    an.s = act;
    f.attrs["activation"] = an;
    graph::Attribute ap;
    ap.type = graph::Attribute::Type::kFloats;
    ap.floats = act_params;
    f.attrs["activation_params"] = ap;
    f.inputs.assign(quant::kQNumInputs, -1);
    f.inputs[quant::kQX] = xq;
    const std::string base = n.name.empty() ? g.values[n.outputs[0]].name : n.name;
    if (dx) {
      f.inputs[quant::kQXScale] = dx->inputs[1];
      if (xz) f.inputs[quant::kQXZero] = dx->inputs[2];
    } else {
      f.attrs["x_per_token"] = int_attr(1);
      // A smoothing Mul in front joins the kernel's quantization pass; the
      // Mul stays for any other reader and goes when none is left.
      int unsmoothed = -1;
      std::vector<float> factors;
      if (smoothing_mul_of(xq, trans_b ? ws[1] : ws[0], &unsmoothed, &factors)) {
        Tensor t = Tensor::empty(DType::kFloat32, {static_cast<int64_t>(factors.size())});
        std::copy(factors.begin(), factors.end(), t.data_as<float>());
        f.inputs[quant::kQX] = unsmoothed;
        f.inputs[quant::kQXSmooth] = add_constant(base + "_x_smooth", std::move(t));
      }
    }
    f.inputs[quant::kQW] = dw->inputs[0];
    Tensor scales = Tensor::empty(DType::kFloat32, {channels});
    for (int64_t c = 0; c < channels; ++c)
      scales.data_as<float>()[c] = wsc.data_as<float>()[wsc.numel() == 1 ? 0 : c] * alpha;
    f.inputs[quant::kQWScale] = add_constant(base + "_w_scale", std::move(scales));
    if (!bias.empty()) {
      Tensor b = Tensor::empty(DType::kFloat32, {channels});
      std::copy(bias.begin(), bias.end(), b.data_as<float>());
      f.inputs[quant::kQBias] = add_constant(base + "_bias", std::move(b));
    }
    if (!quants.empty()) {
      const Node& q = g.nodes[quants[0]];
      f.inputs[quant::kQYScale] = q.inputs[1];
      f.inputs[quant::kQYZero] = q.inputs[2];
      f.outputs = {q.outputs[0]};
    } else {
      f.outputs = {tail};
    }
    if (!rewrite_fits(g, f, ctx)) {
      if (f.inputs[quant::kQXSmooth] < 0) return false;
      f.inputs[quant::kQX] = xq;  // a kernel without x_smooth: the Mul stays in front
      f.inputs[quant::kQXSmooth] = -1;
      if (!rewrite_fits(g, f, ctx)) return false;
    }
    if (!quants.empty()) {
      const int y = g.nodes[quants[0]].outputs[0];
      for (int u : quants) {
        dead[u] = 1;
        if (u != quants[0]) replace_uses(g, g.nodes[u].outputs[0], y);
      }
      ++*quantized_out;
    }
    for (int d : tail_dead) dead[d] = 1;
    dead[i] = 1;
    added.push_back(std::move(f));
    return true;
  }

  static graph::Attribute int_attr(int64_t v) {
    graph::Attribute a;
    a.type = graph::Attribute::Type::kInt;
    a.i = v;
    return a;
  }
};

}  // namespace

bool has_dequantize(const graph::Graph& g) {
  for (const auto& n : g.nodes)
    if (is_default(n, "DequantizeLinear")) return true;
  return false;
}

int fuse_qdq(graph::Graph& g, const PassContext& ctx) {
  if (!ctx.allow_fusion || !any_kernel_for(kTwinferDomain, quant::kQMatMulOp, ctx.backend) ||
      !any_kernel_for(kTwinferDomain, quant::kQConvOp, ctx.backend))
    return 0;
  Rewriter r(g, ctx);
  int fused = 0, convs = 0, quantized = 0;
  const size_t count = g.nodes.size();
  for (size_t i = 0; i < count; ++i) {
    if (r.dead[i]) continue;
    const bool conv = is_default(g.nodes[i], "Conv");
    if (r.fuse(i, &quantized)) {
      ++fused;
      convs += conv;
    }
  }
  if (!fused) return 0;
  replace_fused_nodes(g, r.dead, r.added);
  ctx.note("fuse_qdq: " + std::to_string(fused - convs) + " MatMul/Gemm -> com.twinfer::QMatMul, " +
           std::to_string(convs) + " Conv -> com.twinfer::QConv (" + std::to_string(quantized) +
           " with int8 output)");
  return fused;
}

}  // namespace twinfer::passes
