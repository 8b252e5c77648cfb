#include "graph/passes/fuse_attention_softmax.h"

#include "graph/domains.h"
#include "graph/passes/rewrite_check.h"
#include "graph/passes/rewrite_util.h"
#include "graph/passes/softmax_chain.h"
#include "ops/nn/attention_softmax.h"

namespace twinfer::passes {

namespace {

// Whether a scalar Mul in front of the scores MatMul can be dropped: its
// output has its input's shape (a [1, 1, 1, 1] factor could widen a rank).
bool same_shape(const graph::Graph& g, int node) {
  Shape in, out;
  const graph::Node& n = g.nodes[node];
  for (int v : n.inputs)
    if (v >= 0 && !g.values[v].is_constant()) {
      if (!concrete_shape(g, v, &in)) return false;
      return concrete_shape(g, n.outputs[0], &out) && in == out;
    }
  return false;
}

}  // namespace

int fuse_attention_softmax(graph::Graph& g, const PassContext& ctx) {
  if (ctx.backend != Backend::kCPU) return 0;
  const std::vector<std::vector<int>> users = value_users(g);
  std::vector<char> dead(g.nodes.size(), 0);
  std::vector<graph::Node> added;
  int fused = 0;
  for (size_t si = 0; si < g.nodes.size(); ++si) {
    SoftmaxChain c;
    if (!match_softmax_chain(g, users, dead, ctx.opset, static_cast<int>(si), &c)) continue;
    const bool guard = c.guard_where >= 0;
    if (c.q_mul < 0 && c.k_mul < 0 && c.scaler < 0 && c.mask < 0 && !guard) continue;  // a plain Softmax
    if ((c.q_mul >= 0 && !same_shape(g, c.q_mul)) || (c.k_mul >= 0 && !same_shape(g, c.k_mul))) continue;
    graph::Node sm;
    sm.name = g.nodes[si].name.empty() ? "attention_softmax" : g.nodes[si].name + "/attention";
    sm.domain = kTwinferDomain;
    sm.op_type = nn::kAttentionSoftmaxOp;
    graph::Attribute scale;
    scale.type = graph::Attribute::Type::kFloat;
    scale.f = static_cast<float>(c.scale);
    sm.attrs["scale"] = scale;
    sm.attrs["nan_to_zero"] = int_attr(guard ? 1 : 0);
    sm.inputs = {g.nodes[c.scores_matmul].outputs[0]};
    if (c.mask >= 0) sm.inputs.push_back(c.mask);
    sm.outputs = {c.probs};
    if (!rewrite_fits(g, sm, ctx)) continue;
    g.nodes[c.scores_matmul].inputs = {c.q, c.k};  // the scalar factors now in `scale`
    for (int n : c.between()) dead[n] = 1;
    added.push_back(std::move(sm));
    ++fused;
  }
  if (fused) {
    replace_fused_nodes(g, dead, added);
    ctx.note("fuse_attention_softmax: " + std::to_string(fused) +
             " attention softmax chains -> com.twinfer::AttentionSoftmax");
  }
  return fused;
}

}  // namespace twinfer::passes
