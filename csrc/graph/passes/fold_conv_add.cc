#include "graph/passes/fold_conv_add.h"

#include "graph/passes/rewrite_check.h"
#include "graph/passes/rewrite_util.h"

namespace twinfer::passes {

namespace {

// Whether constant c, added to y of rank `rank` with `cout` channels (dim 1),
// adds one value per channel: its dims right-aligned to y's are all 1 but
// dim 1, which is cout or 1, and it does not raise y's rank.
bool per_channel(const Tensor& c, size_t rank, int64_t cout) {
  const Shape& s = c.shape();
  if (c.dtype() != DType::kFloat32 || s.size() > rank) return false;
  for (size_t k = 0; k < s.size(); ++k) {
    const size_t dim = rank - s.size() + k;
    if (s[k] != 1 && !(dim == 1 && s[k] == cout)) return false;
  }
  return true;
}

}  // namespace

int fold_conv_add(graph::Graph& g, const PassContext& ctx) {
  auto users = value_users(g);
  std::vector<char> dead(g.nodes.size(), 0);
  int folded = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const graph::Node& add = g.nodes[i];
    if (add.op_type != "Add" || !add.domain.empty() || add.inputs.size() != 2) continue;
    for (int k = 0; k < 2; ++k) {
      const int x = add.inputs[k], c = add.inputs[1 - k];
      if (x < 0 || c < 0 || !g.values[c].is_constant()) continue;
      const int p = g.values[x].producer;
      if (p < 0 || dead[p] || users[x].size() != 1 || is_graph_output(g, x)) continue;
      graph::Node& conv = g.nodes[p];
      if (conv.op_type != "Conv" || !conv.domain.empty() || conv.inputs.size() < 2) continue;
      const auto& wv = g.values[conv.inputs[1]];
      const auto& yv = g.values[x];
      if (!wv.is_constant() || wv.constant.dtype() != DType::kFloat32 || wv.constant.shape().size() < 3 ||
          !yv.has_shape || yv.dtype != DType::kFloat32)
        continue;
      const int64_t cout = wv.constant.shape()[0];
      const Tensor& cv = g.values[c].constant;
      if (!per_channel(cv, yv.shape.size(), cout)) continue;
      const bool has_bias = conv.inputs.size() > 2 && conv.inputs[2] >= 0;
      const Tensor* bias = has_bias ? &g.values[conv.inputs[2]].constant : nullptr;
      if (has_bias && (!g.values[conv.inputs[2]].is_constant() || bias->dtype() != DType::kFloat32 ||
                       bias->numel() != cout))
        continue;
      // A new tensor: the old bias may be shared with other nodes.
      Tensor b = Tensor::empty(DType::kFloat32, {cout});
      const float* cp = cv.data_as<float>();
      for (int64_t m = 0; m < cout; ++m)
        b.data_as<float>()[m] = (bias ? bias->data_as<float>()[m] : 0.f) + cp[cv.numel() == 1 ? 0 : m];
      const int bid = add_constant(g, conv.name + "/add_folded_bias", std::move(b));
      graph::Node folded_conv = conv;
      folded_conv.inputs.resize(3);
      folded_conv.inputs[2] = bid;
      folded_conv.outputs[0] = add.outputs[0];
      if (!rewrite_fits(g, folded_conv, ctx)) continue;  // the new constant stays unused and is dropped
      conv = std::move(folded_conv);
      dead[i] = 1;
      ++folded;
      break;
    }
  }
  if (folded) {
    erase_nodes(g, dead);
    g.topo_sort();
    ctx.note("fold_conv_add: folded " + std::to_string(folded) + " per-channel constant Adds into Conv biases");
  }
  return folded;
}

}  // namespace twinfer::passes
