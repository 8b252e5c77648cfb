#include "graph/passes/fuse_qdq_binary.h"

#include <vector>

#include "graph/domains.h"
#include "graph/passes/qdq_util.h"
#include "graph/passes/rewrite_check.h"
#include "graph/passes/rewrite_util.h"
#include "ops/kernel.h"
#include "ops/quant/qbinary.h"

namespace twinfer::passes {

int fuse_qdq_binary(graph::Graph& g, const PassContext& ctx) {
  if (!ctx.allow_fusion || !any_kernel_for(kTwinferDomain, quant::kQBinaryOp, ctx.backend)) return 0;
  const std::vector<std::vector<int>> users = value_users(g);
  std::vector<char> dead(g.nodes.size(), 0);
  std::vector<graph::Node> added;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const graph::Node& n = g.nodes[i];
    if (!n.domain.empty() || (n.op_type != "Add" && n.op_type != "Mul") || n.inputs.size() != 2 ||
        n.outputs.size() != 1)
      continue;
    QParams pa, pb;
    const graph::Node* da = per_tensor_dequantize(g, n.inputs[0], ctx.opset, &pa, &dead);
    const graph::Node* db = per_tensor_dequantize(g, n.inputs[1], ctx.opset, &pb, &dead);
    int out = n.outputs[0];
    if (!da || !db || users[out].empty() || is_graph_output(g, out)) continue;
    // An Add followed by its sole reader Relu (ResNet's residual): the Relu joins.
    int relu = -1;
    if (users[out].size() == 1) {
      const graph::Node& r = g.nodes[users[out][0]];
      if (r.domain.empty() && r.op_type == "Relu" && !dead[users[out][0]] && !r.outputs.empty() && r.outputs[0] >= 0) {
        relu = users[out][0];
        out = r.outputs[0];
        if (users[out].empty() || is_graph_output(g, out)) continue;
      }
    }
    // Without a Relu, an Add of a one-element float32 constant before the
    // QuantizeLinear joins as the offset (QLinearAdd's output zero point,
    // expand_contrib_quant.cc).
    int offset_add = -1;
    float offset = 0.f;
    if (relu < 0 && users[out].size() == 1) {
      const int u = users[out][0];
      const graph::Node& a = g.nodes[u];
      if (!dead[u] && a.domain.empty() && a.op_type == "Add" && a.inputs.size() == 2 && a.outputs.size() == 1 &&
          a.outputs[0] >= 0) {
        const int c = a.inputs[0] == out ? a.inputs[1] : a.inputs[0];
        const graph::Value& cv = g.values[c];
        if (c != out && cv.is_constant() && cv.constant.dtype() == DType::kFloat32 && cv.constant.numel() == 1 &&
            !users[a.outputs[0]].empty() && !is_graph_output(g, a.outputs[0])) {
          offset_add = u;
          offset = *cv.constant.data_as<float>();
          out = a.outputs[0];
        }
      }
    }
    bool ok = true;
    QParams py;
    for (size_t k = 0; k < users[out].size() && ok; ++k) {
      const int u = users[out][k];
      const graph::Node& q = g.nodes[u];
      QParams p;
      ok = !dead[u] && q.domain.empty() && q.op_type == "QuantizeLinear" && q.inputs[0] == out &&
           q.inputs.size() > 2 && q.inputs[2] >= 0 && !is_graph_output(g, q.outputs[0]) &&
           per_tensor_qparams(g, q, g.values[q.outputs[0]].dtype, ctx.opset, &p) && (k == 0 || p == py);
      py = p;
    }
    if (!ok) continue;
    const graph::Node& q0 = g.nodes[users[out][0]];
    graph::Node f;
    f.name = n.name;
    f.domain = kTwinferDomain;
    f.op_type = quant::kQBinaryOp;
    graph::Attribute op;
    op.type = graph::Attribute::Type::kString;
    op.s = n.op_type;
    f.attrs["op"] = op;
    if (offset_add >= 0) {
      graph::Attribute off;
      off.type = graph::Attribute::Type::kFloat;
      off.f = offset;
      f.attrs["offset"] = off;
    }
    if (relu >= 0) {
      graph::Attribute act;
      act.type = graph::Attribute::Type::kString;
      act.s = "Relu";
      f.attrs["activation"] = act;
    }
    auto zero_of = [](const graph::Node& d) { return d.inputs.size() > 2 ? d.inputs[2] : -1; };
    f.inputs = {da->inputs[0], da->inputs[1], zero_of(*da), db->inputs[0], db->inputs[1], zero_of(*db),
                q0.inputs[1], q0.inputs[2]};
    f.outputs = {q0.outputs[0]};
    if (!rewrite_fits(g, f, ctx)) continue;
    if (relu >= 0) dead[relu] = 1;
    if (offset_add >= 0) dead[offset_add] = 1;
    for (size_t k = 0; k < users[out].size(); ++k) {
      const int u = users[out][k];
      dead[u] = 1;
      if (k) replace_uses(g, g.nodes[u].outputs[0], q0.outputs[0]);
    }
    dead[i] = 1;
    added.push_back(std::move(f));
  }
  if (added.empty()) return 0;
  const int fused = static_cast<int>(added.size());
  replace_fused_nodes(g, dead, added);
  ctx.note("fuse_qdq_binary: " + std::to_string(fused) + " Add/Mul [+Relu | +offset] -> com.twinfer::QBinary");
  return fused;
}

}  // namespace twinfer::passes
