#include "graph/passes/fold_conv_bn.h"

#include <cmath>

#include "graph/passes/rewrite_check.h"
#include "graph/passes/rewrite_util.h"

namespace twinfer::passes {

namespace {

// A float32 constant of exactly `n` elements, or nullptr.
const Tensor* f32_vector(const graph::Graph& g, const graph::Node& n, size_t i, int64_t count) {
  if (i >= n.inputs.size() || n.inputs[i] < 0) return nullptr;
  const auto& v = g.values[n.inputs[i]];
  if (!v.is_constant() || v.constant.dtype() != DType::kFloat32 || v.constant.numel() != count) return nullptr;
  return &v.constant;
}

}  // namespace

int fold_conv_bn(graph::Graph& g, const PassContext& ctx) {
  auto users = value_users(g);
  std::vector<char> dead(g.nodes.size(), 0);
  int folded = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    auto& bn = g.nodes[i];
    if (bn.op_type != "BatchNormalization" || !bn.domain.empty()) continue;
    if (bn.attr_int("training_mode", 0) != 0) continue;
    if (bn.outputs.size() > 1) {
      bool extra_used = false;
      for (size_t k = 1; k < bn.outputs.size(); ++k) extra_used |= bn.outputs[k] >= 0;
      if (extra_used) continue;
    }
    int x = bn.inputs[0];
    if (x < 0 || g.values[x].producer < 0) continue;
    auto& conv = g.nodes[g.values[x].producer];
    if (conv.op_type != "Conv" || !conv.domain.empty() || dead[g.values[x].producer]) continue;
    if (users[x].size() != 1 || is_graph_output(g, x)) continue;
    const auto& wv = g.values[conv.inputs[1]];
    if (!wv.is_constant() || wv.constant.dtype() != DType::kFloat32 || wv.constant.shape().empty()) continue;
    const int64_t cout = wv.constant.shape()[0];
    const Tensor* gamma = f32_vector(g, bn, 1, cout);
    const Tensor* beta = f32_vector(g, bn, 2, cout);
    const Tensor* mean = f32_vector(g, bn, 3, cout);
    const Tensor* var = f32_vector(g, bn, 4, cout);
    const Tensor* bias = conv.inputs.size() > 2 && conv.inputs[2] >= 0 ? f32_vector(g, conv, 2, cout) : nullptr;
    if (!gamma || !beta || !mean || !var) continue;
    if (conv.inputs.size() > 2 && conv.inputs[2] >= 0 && !bias) continue;
    const float eps = bn.attr_float("epsilon", 1e-5f);

    // New tensors: the originals may be shared with other nodes.
    Tensor w = wv.constant.clone();
    Tensor b = Tensor::empty(DType::kFloat32, {cout});
    const int64_t per_out = w.numel() / cout;
    float* wp = w.data_as<float>();
    for (int64_t c = 0; c < cout; ++c) {
      const double s = gamma->data_as<float>()[c] / std::sqrt(double(var->data_as<float>()[c]) + eps);
      for (int64_t k = 0; k < per_out; ++k) wp[c * per_out + k] = float(wp[c * per_out + k] * s);
      const double b0 = bias ? bias->data_as<float>()[c] : 0.0;
      b.data_as<float>()[c] = float((b0 - mean->data_as<float>()[c]) * s + beta->data_as<float>()[c]);
    }
    const int wid = add_constant(g, conv.name + "/bn_folded_weight", std::move(w));
    const int bid = add_constant(g, conv.name + "/bn_folded_bias", std::move(b));
    // The conv now produces the BN's output directly.
    graph::Node folded_conv = conv;
    folded_conv.inputs.resize(3);
    folded_conv.inputs[1] = wid;
    folded_conv.inputs[2] = bid;
    folded_conv.outputs[0] = bn.outputs[0];
    if (!rewrite_fits(g, folded_conv, ctx)) continue;  // the new constants stay unused and are dropped
    conv = std::move(folded_conv);
    dead[i] = 1;
    ++folded;
  }
  if (folded) {
    erase_nodes(g, dead);
    g.topo_sort();
    ctx.note("fold_conv_bn: folded " + std::to_string(folded) + " BatchNormalization nodes into Conv");
  }
  return folded;
}

}  // namespace twinfer::passes
