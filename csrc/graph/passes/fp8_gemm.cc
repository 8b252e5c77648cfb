#include "graph/passes/fp8_gemm.h"

#include <algorithm>
#include <cmath>

#include "core/float8.h"
#include "graph/domains.h"
#include "graph/passes/rewrite_check.h"
#include "graph/passes/rewrite_util.h"
#include "ops/quant/fp8_matmul.h"

namespace twinfer::passes {

namespace {

constexpr float kE4M3Max = 448.f;

bool is_op(const graph::Node& n, const char* op) {
  return n.op_type == op && (n.domain.empty() || n.domain == kTwinferDomain);
}

Tensor scalar_f32(float v) {
  Tensor t = Tensor::empty(DType::kFloat32, {});
  *t.data_as<float>() = v;
  return t;
}

// What a MatMul / Gemm node multiplies: x (input 0) by constant 2-D weights
// (input 1) read [K, N] or, transposed, [N, K]; an optional float bias.
struct GemmShape {
  bool trans = false;
  int bias = -1;  // value id of a float32 [N] / [1, N] / scalar bias
};

bool gemm_shape(const graph::Graph& g, const graph::Node& n, GemmShape* s) {
  const bool matmul = is_op(n, "MatMul"), gemm = is_op(n, "Gemm");
  // More than x, W and a bias (com.twinfer::MatMul's residual): FP8MatMul has no place for it.
  if (!(matmul || gemm) || n.inputs.size() < 2 || n.inputs.size() > 3 || n.inputs[0] < 0 || n.inputs[1] < 0)
    return false;
  if (gemm) {
    if (n.attr_int("transA", 0) != 0 || n.attr_float("alpha", 1.f) != 1.f) return false;
    s->trans = n.attr_int("transB", 0) != 0;
    if (n.inputs.size() > 2 && n.inputs[2] >= 0) {
      if (n.attr_float("beta", 1.f) != 1.f) return false;
      s->bias = n.inputs[2];
    }
  } else if (n.inputs.size() > 2 && n.inputs[2] >= 0) {
    s->bias = n.inputs[2];  // com.twinfer MatMul's bias
  }
  const auto& x = g.values[n.inputs[0]];
  return x.dtype == DType::kFloat32 && x.has_shape && !x.shape.empty();
}

// A float32 bias of N values (or one) as [N]; false when it is not one.
bool bias_vector(const graph::Graph& g, int v, int64_t n, Tensor* out) {
  if (v < 0) return true;
  if (!g.values[v].is_constant()) return false;
  const Tensor& t = g.values[v].constant;
  if (t.dtype() != DType::kFloat32 || (t.numel() != 1 && (t.numel() != n || t.shape().back() != n))) return false;
  *out = Tensor::empty(DType::kFloat32, {n});
  for (int64_t c = 0; c < n; ++c) out->data_as<float>()[c] = t.data_as<float>()[t.numel() == 1 ? 0 : c];
  return true;
}

// Weights w (float32 [K, N], or [N, K] with trans) divided by `scale`, as
// E4M3 [N, K].
Tensor e4m3_rows(const Tensor& w, bool trans, float scale) {
  const int64_t k = trans ? w.shape()[1] : w.shape()[0], n = trans ? w.shape()[0] : w.shape()[1];
  Tensor q = Tensor::empty(DType::kFloat8E4M3FN, {n, k});
  const float* x = w.data_as<float>();
  uint8_t* y = q.data_as<uint8_t>();
  for (int64_t c = 0; c < n; ++c)
    for (int64_t i = 0; i < k; ++i) y[c * k + i] = quant::fp8_quantize(trans ? x[c * k + i] : x[i * n + c], scale);
  return q;
}

// FP8 weights as stored ([K, N] or [N, K]) -> [N, K].
Tensor fp8_rows(const Tensor& w, bool trans) {
  if (trans) return w;
  const int64_t k = w.shape()[0], n = w.shape()[1];
  Tensor q = Tensor::empty(DType::kFloat8E4M3FN, {n, k});
  const uint8_t* x = w.data_as<uint8_t>();
  for (int64_t c = 0; c < n; ++c)
    for (int64_t i = 0; i < k; ++i) q.data_as<uint8_t>()[c * k + i] = x[i * n + c];
  return q;
}

graph::Node fp8_node(const graph::Node& n, int x, int x_scale, int w, int w_scale, int bias) {
  graph::Node r;
  r.name = n.name;
  r.domain = kTwinferDomain;
  r.op_type = quant::kFP8MatMulOp;
  r.inputs = {x, x_scale, w, w_scale};
  if (bias >= 0) r.inputs.push_back(bias);
  r.outputs = n.outputs;
  for (const char* a : {"activation", "activation_params"})
    if (n.has_attr(a)) r.attrs[a] = *n.attr(a);
  return r;
}

// The one constant float32 element of value v, if it is one.
bool scalar(const graph::Graph& g, int v, float* out) {
  if (v < 0 || !g.values[v].is_constant()) return false;
  const Tensor& t = g.values[v].constant;
  if (t.dtype() != DType::kFloat32 || t.numel() != 1) return false;
  *out = *t.data_as<float>();
  return true;
}

// A per-tensor E4M3 QuantizeLinear / DequantizeLinear: scale, and a zero
// point of 0 (an E4M3 zero point other than 0 shifts; not this op's form).
bool e4m3_qdq(const graph::Graph& g, const graph::Node& n, float* scale) {
  if (!n.domain.empty() || n.inputs.size() < 2 || !scalar(g, n.inputs[1], scale) || *scale <= 0.f) return false;
  if (n.attr_int("block_size", 0) != 0) return false;
  if (n.inputs.size() > 2 && n.inputs[2] >= 0) {
    const auto& z = g.values[n.inputs[2]];
    if (!z.is_constant() || z.constant.dtype() != DType::kFloat8E4M3FN || z.constant.numel() != 1 ||
        (*z.constant.data_as<uint8_t>() & 0x7F) != 0)
      return false;
  }
  return true;
}

}  // namespace

int fp8_gemms(graph::Graph& g, const std::map<std::string, float>& activation_amax,
              const std::set<std::string>& keep_float, const PassContext& ctx) {
  int rewritten = 0, skipped = 0;
  for (auto& n : g.nodes) {
    GemmShape s;
    if (keep_float.count(n.name) || !gemm_shape(g, n, &s)) continue;
    const auto& wv = g.values[n.inputs[1]];
    if (!wv.is_constant() || wv.constant.dtype() != DType::kFloat32 || wv.constant.shape().size() != 2) continue;
    auto amax = activation_amax.find(g.values[n.inputs[0]].name);
    if (amax == activation_amax.end() || !(amax->second > 0.f)) {
      ++skipped;  // not calibrated (its input never reached a layer the calibration watched)
      continue;
    }
    const Tensor w = wv.constant;  // copy: adding constants may move the values
    const int64_t channels = w.shape()[s.trans ? 0 : 1];
    Tensor bias;
    if (!bias_vector(g, s.bias, channels, &bias)) continue;
    float wmax = 0.f;
    for (int64_t i = 0; i < w.numel(); ++i) wmax = std::max(wmax, std::fabs(w.data_as<float>()[i]));
    const float w_scale = wmax > 0.f ? wmax / kE4M3Max : 1.f;
    const std::string name = g.values[n.inputs[1]].name;
    const int wq = add_constant(g, name + "_e4m3", e4m3_rows(w, s.trans, w_scale));
    const int ws = add_constant(g, name + "_fp8_scale", scalar_f32(w_scale));
    const int xs = add_constant(g, g.values[n.inputs[0]].name + "_fp8_scale", scalar_f32(amax->second / kE4M3Max));
    const int b = bias.defined() ? add_constant(g, n.name + "_bias", std::move(bias)) : -1;
    graph::Node r = fp8_node(n, n.inputs[0], xs, wq, ws, b);
    if (!rewrite_fits(g, r, ctx)) continue;  // new constants stay unused and are dropped
    n = std::move(r);
    ++rewritten;
  }
  if (rewritten || skipped)
    ctx.note("fp8: " + std::to_string(rewritten) + " MatMul/Gemm -> com.twinfer::FP8MatMul" +
             (skipped ? " (" + std::to_string(skipped) + " uncalibrated left in float)" : ""));
  return rewritten;
}

int fuse_fp8_qdq(graph::Graph& g, const PassContext& ctx) {
  // The CPU has no FP8 arithmetic: there DQ(weights) folds to float32 and
  // oneDNN's float GEMM is both faster and as exact as FP8MatMul's reference.
  if (ctx.backend != Backend::kCUDA) return 0;
  // Before Ada (8.9) a GPU has no E4M3 tensor cores: the Q/DQ pairs stay and
  // the GEMM runs in float on the dequantized values, as onnxruntime would.
  if (ctx.compute_capability < 89) {
    ctx.note("fuse_fp8_qdq: skipped, compute capability " + std::to_string(ctx.compute_capability / 10) + "." +
             std::to_string(ctx.compute_capability % 10) + " has no FP8 tensor cores");
    return 0;
  }
  std::vector<int> producer(g.values.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int o : g.nodes[i].outputs)
      if (o >= 0) producer[o] = static_cast<int>(i);
  auto made_by = [&](int v, const char* op) -> const graph::Node* {
    if (v < 0 || producer[v] < 0) return nullptr;
    const graph::Node& p = g.nodes[producer[v]];
    return p.domain.empty() && p.op_type == op ? &p : nullptr;
  };
  int fused = 0;
  for (auto& n : g.nodes) {
    GemmShape s;
    if (!is_op(n, "MatMul") && !is_op(n, "Gemm")) continue;
    if (n.inputs.size() < 2 || n.inputs.size() > 3) continue;  // a residual input has no place in FP8MatMul
    // Activation: x -> Q(e4m3) -> DQ -> this node, both with one scale.
    const graph::Node* dq_x = made_by(n.inputs[0], "DequantizeLinear");
    const graph::Node* q_x = dq_x ? made_by(dq_x->inputs[0], "QuantizeLinear") : nullptr;
    const graph::Node* dq_w = made_by(n.inputs[1], "DequantizeLinear");
    if (!dq_x || !q_x || !dq_w) continue;
    float xs_q = 0.f, xs_dq = 0.f, ws = 0.f;
    if (!e4m3_qdq(g, *q_x, &xs_q) || !e4m3_qdq(g, *dq_x, &xs_dq) || xs_q != xs_dq || !e4m3_qdq(g, *dq_w, &ws))
      continue;
    const auto& qv = g.values[dq_x->inputs[0]];
    const auto& wv = g.values[dq_w->inputs[0]];
    if (qv.dtype != DType::kFloat8E4M3FN || !wv.is_constant() || wv.constant.dtype() != DType::kFloat8E4M3FN ||
        wv.constant.shape().size() != 2 || g.values[q_x->inputs[0]].dtype != DType::kFloat32)
      continue;
    // The node's own rule for the weights' orientation and bias.
    s.trans = is_op(n, "Gemm") && n.attr_int("transB", 0) != 0;
    if (is_op(n, "Gemm") && (n.attr_int("transA", 0) != 0 || n.attr_float("alpha", 1.f) != 1.f)) continue;
    if (n.inputs.size() > 2 && n.inputs[2] >= 0) {
      if (is_op(n, "Gemm") && n.attr_float("beta", 1.f) != 1.f) continue;
      s.bias = n.inputs[2];
    }
    const int64_t channels = wv.constant.shape()[s.trans ? 0 : 1];
    Tensor bias;
    if (!bias_vector(g, s.bias, channels, &bias)) continue;
    const int x = q_x->inputs[0];
    const std::string wname = wv.name;
    const Tensor w = wv.constant;
    const int wq = add_constant(g, wname + "_rows", fp8_rows(w, s.trans));
    const int xsc = add_constant(g, g.values[x].name + "_fp8_scale", scalar_f32(xs_q));
    const int wsc = add_constant(g, wname + "_fp8_scale", scalar_f32(ws));
    const int b = bias.defined() ? add_constant(g, n.name + "_bias", std::move(bias)) : -1;
    graph::Node r = fp8_node(n, x, xsc, wq, wsc, b);
    if (!rewrite_fits(g, r, ctx)) continue;
    n = std::move(r);  // the Q / DQ nodes go with remove_dead when nothing else reads them
    ++fused;
  }
  if (fused) ctx.note("fuse_fp8_qdq: " + std::to_string(fused) + " E4M3 QDQ MatMul/Gemm -> com.twinfer::FP8MatMul");
  return fused;
}

}  // namespace twinfer::passes
