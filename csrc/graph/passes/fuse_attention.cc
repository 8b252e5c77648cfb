#include "graph/passes/fuse_attention.h"

#include <cmath>

#include "graph/domains.h"
#include "graph/passes/grouped_heads.h"
#include "graph/passes/rewrite_check.h"
#include "graph/passes/rewrite_util.h"
#include "graph/passes/softmax_chain.h"
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

}  // namespace

int fuse_attention(graph::Graph& g, const PassContext& ctx) {
  if (ctx.backend == Backend::kCPU || !any_kernel_for(kTwinferDomain, "Attention", ctx.backend)) return 0;
  const std::vector<std::vector<int>> users = value_users(g);
  std::vector<char> dead(g.nodes.size(), 0);
  int fused = 0;
  for (size_t si = 0; si < g.nodes.size(); ++si) {
    SoftmaxChain c;
    if (!match_softmax_chain(g, users, dead, ctx.opset, static_cast<int>(si), &c, /*sixteen_bit=*/true)) continue;
    const int sv = g.nodes[si].inputs[0];
    const Shape ss = shape_of(g, sv);
    if (ss.size() != 4) continue;
    // The probabilities' one reader: the MatMul with v.
    const int p = c.probs;
    if (is_graph_output(g, p) || users[p].size() != 1) continue;
    const int mm2 = users[p][0];
    if (dead[mm2] || !is_op(g.nodes[mm2], "MatMul") || g.nodes[mm2].inputs[0] != p) continue;
    const int v = g.nodes[mm2].inputs[1], out = g.nodes[mm2].outputs[0];
    const int mm1 = c.scores_matmul, q = c.q, kt = c.k, mask = c.mask;
    const double scale = c.scale;
    std::vector<int> remove = c.between();
    remove.push_back(mm2);
    remove.push_back(mm1);
    const int pk = sole_producer(g, users, dead, kt, c.k_mul >= 0 ? c.k_mul : mm1);
    // k in [B, H, Sk, D]: the Transpose's input when its perm swaps the last two
    // axes of it, else a Transpose of k' added.
    const Shape qs = shape_of(g, q), kts = shape_of(g, kt), vs = shape_of(g, v), os = shape_of(g, out);
    if (qs.size() != 4 || kts.size() != 4 || vs.size() != 4 || os.size() != 4) continue;
    const int64_t B = qs[0], H = qs[1], Sq = qs[2], D = qs[3], Sk = kts[3];
    if (kts != Shape{B, H, D, Sk} || vs[0] != B || vs[1] != H || vs[2] != Sk || ss != Shape{B, H, Sq, Sk}) continue;
    // float32, or float16 / bfloat16 (the kernels accumulate and take the softmax in float32).
    const DType type = g.values[q].dtype;
    auto is_float = [](DType t) { return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16; };
    if (!is_float(type) || g.values[v].dtype != type || g.values[kt].dtype != type) continue;
    if (mask >= 0) {
      const Shape ms = shape_of(g, mask);
      // An additive mask has the scores' type (the kernels read it so).
      if (ms.empty() || ms.size() > 4 || g.values[mask].dtype != type) continue;
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
      g.values[k].dtype = type;
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
    // Grouped heads: where K and V are both repeated per group of query heads,
    // the attention reads them unrepeated where its kernel takes that (query
    // head h reads K/V head h / G): nothing is repeated in memory. In 16
    // bits cuDNN's fused attention takes grouped heads as they are (its GQA,
    // SdpaSpec::Hkv), as does our own kernel.
    std::vector<int> ungrouped;
    const int gk = added.empty() ? grouped_source(g, users, dead, k, pk, ctx.opset, &ungrouped) : -1;
    const int gv = gk >= 0 ? grouped_source(g, users, dead, v, mm2, ctx.opset, &ungrouped) : -1;
    if (gv >= 0 && shape_of(g, gk)[1] == shape_of(g, gv)[1]) {
      graph::Node grouped = att;
      grouped.inputs[1] = gk;
      grouped.inputs[2] = gv;
      if (rewrite_fits(g, grouped, ctx)) {
        att = std::move(grouped);
        remove.insert(remove.end(), ungrouped.begin(), ungrouped.end());
      }
    }
    for (int r : remove) dead[r] = 1;
    // The Attention takes the last MatMul's slot (its inputs all exist by then);
    // an added Transpose goes at the end and the sort below puts it in place.
    g.nodes[mm2] = att;
    dead[mm2] = 0;
    for (auto& t : added) {
      g.nodes.push_back(std::move(t));
      dead.push_back(0);
    }
    ++fused;
  }
  if (fused) {
    erase_nodes(g, dead);
    g.topo_sort();
    ctx.note("fuse_attention: " + std::to_string(fused) + " attention patterns -> com.twinfer::Attention");
  }
  return fused;
}

}  // namespace twinfer::passes
