#include "graph/passes/weight_only_int8.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "graph/domains.h"
#include "graph/passes/rewrite_check.h"
#include "graph/passes/rewrite_util.h"
#include "ops/kernel.h"

namespace twinfer::passes {

namespace {

constexpr const char* kOp = "MatMulW8";
// Smaller weights are not worth a tiled kernel (and save next to nothing).
constexpr int64_t kMinWeights = 4096;

bool is_op(const graph::Node& n, const char* op) {
  return n.op_type == op && (n.domain.empty() || n.domain == kTwinferDomain);
}

// w as [K, N] (trans = false) or [N, K] (trans = true) -> q [N, K], scale [N].
void quantize(const Tensor& w, bool trans, float alpha, Tensor* q, Tensor* scale) {
  const int64_t k = trans ? w.shape()[1] : w.shape()[0], n = trans ? w.shape()[0] : w.shape()[1];
  const float* x = w.data_as<float>();
  auto at = [&](int64_t c, int64_t i) { return trans ? x[c * k + i] : x[i * n + c]; };
  *q = Tensor::empty(DType::kInt8, {n, k});
  *scale = Tensor::empty(DType::kFloat32, {n});
  int8_t* y = q->data_as<int8_t>();
  for (int64_t c = 0; c < n; ++c) {
    float amax = 0.f;
    for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(at(c, i)));
    const float s = amax > 0.f ? amax / 127.f : 1.f;
    for (int64_t i = 0; i < k; ++i)
      y[c * k + i] = static_cast<int8_t>(std::clamp(std::nearbyint(at(c, i) / s), -127.f, 127.f));
    scale->data_as<float>()[c] = s * alpha;
  }
}

// A float32 constant of one or N values along the last dim (others 1).
bool bias_vector(const graph::Graph& g, int v, int64_t n, Tensor* out) {
  if (v < 0 || !g.values[v].is_constant()) return false;
  const Tensor& t = g.values[v].constant;
  if (t.dtype() != DType::kFloat32) return false;
  if (t.numel() != 1) {
    if (t.numel() != n || t.shape().back() != n) return false;
  }
  *out = Tensor::empty(DType::kFloat32, {n});
  for (int64_t c = 0; c < n; ++c) out->data_as<float>()[c] = t.data_as<float>()[t.numel() == 1 ? 0 : c];
  return true;
}

}  // namespace

int quantize_weights_int8(graph::Graph& g, const PassContext& ctx) {
  if (!any_kernel_for(kTwinferDomain, kOp, ctx.backend)) return 0;
  std::map<std::pair<int, bool>, std::pair<int, int>> done;  // (weight, transposed) -> (q, scale): shared weights
  int rewritten = 0;
  size_t before = 0, after = 0;
  for (auto& n : g.nodes) {
    const bool matmul = is_op(n, "MatMul"), gemm = is_op(n, "Gemm");
    if (!(matmul || gemm) || n.inputs.size() < 2 || n.inputs.size() > 3 || n.inputs[0] < 0 || n.inputs[1] < 0) continue;
    const auto& xv = g.values[n.inputs[0]];
    const auto& wv = g.values[n.inputs[1]];
    if (xv.dtype != DType::kFloat32 || !xv.has_shape || !wv.is_constant() || wv.constant.dtype() != DType::kFloat32 ||
        wv.constant.shape().size() != 2 || wv.constant.numel() < kMinWeights)
      continue;
    bool trans = false;
    float alpha = 1.f, beta = 1.f;
    if (gemm) {
      if (n.attr_int("transA", 0) != 0 || xv.shape.size() != 2) continue;
      trans = n.attr_int("transB", 0) != 0;
      alpha = n.attr_float("alpha", 1.f);
      beta = n.attr_float("beta", 1.f);
    } else if (xv.shape.size() < 2) {
      continue;
    }
    const int64_t channels = wv.constant.shape()[trans ? 0 : 1];
    Tensor bias;
    const int bias_in = n.inputs.size() > 2 ? n.inputs[2] : -1;
    if (bias_in >= 0) {
      if (!bias_vector(g, bias_in, channels, &bias)) continue;
      if (beta != 1.f)
        for (int64_t c = 0; c < channels; ++c) bias.data_as<float>()[c] *= beta;
    }
    const int w = n.inputs[1];
    auto it = done.find({w, trans});
    if (it == done.end() || alpha != 1.f) {
      Tensor q, s;
      quantize(g.values[w].constant, trans, alpha, &q, &s);
      const std::string name = g.values[w].name;
      before += g.values[w].constant.bytes();
      after += q.bytes() + s.bytes();
      const int qi = add_constant(g, name + "_int8", std::move(q));
      const int si = add_constant(g, name + "_scale", std::move(s));
      it = done.insert_or_assign({w, trans}, std::make_pair(qi, si)).first;
    }
    std::vector<int> inputs{n.inputs[0], it->second.first, it->second.second};
    if (bias.defined()) inputs.push_back(add_constant(g, n.name + "_bias", std::move(bias)));
    graph::Node r;
    r.name = n.name;
    r.domain = kTwinferDomain;
    r.op_type = kOp;
    r.inputs = std::move(inputs);
    r.outputs = n.outputs;
    for (const char* a : {"activation", "activation_params"})
      if (n.has_attr(a)) r.attrs[a] = *n.attr(a);
    if (!rewrite_fits(g, r, ctx)) continue;  // the int8 copy, if new, stays unused and is dropped
    n = std::move(r);
    ++rewritten;
  }
  if (rewritten)
    ctx.note("weights int8: " + std::to_string(rewritten) + " MatMul/Gemm -> com.twinfer::MatMulW8 (" +
             std::to_string(before >> 10) + " KiB float32 -> " + std::to_string(after >> 10) + " KiB)");
  return rewritten;
}

}  // namespace twinfer::passes
