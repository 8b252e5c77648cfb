#include "graph/passes/int8_movement.h"

#include <vector>

#include "graph/passes/rewrite_util.h"

namespace twinfer::passes {

namespace {

using graph::Graph;
using graph::Node;

// Ops that only move or select values, and which of their inputs carry data.
bool data_inputs(const Node& n, std::vector<size_t>* ins) {
  if (!n.domain.empty() || n.inputs.empty()) return false;
  static const char* kFirstInputOnly[] = {"Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Identity",
                                          "Gather", "Slice", "Expand", "DepthToSpace", "SpaceToDepth", "MaxPool"};
  ins->clear();
  if (n.op_type == "Concat") {
    for (size_t k = 0; k < n.inputs.size(); ++k) ins->push_back(k);
    return true;
  }
  for (const char* op : kFirstInputOnly)
    if (n.op_type == op) {
      ins->push_back(0);
      return true;
    }
  return false;
}

struct QParams {
  float scale = 0.f;
  int64_t zero = 0;
  DType type = DType::kUndefined;
  bool operator==(const QParams& o) const { return scale == o.scale && zero == o.zero && type == o.type; }
};

int64_t scalar_int(const Tensor& t) {
  switch (t.dtype()) {
    case DType::kInt8: return *t.data_as<int8_t>();
    case DType::kUInt8: return *t.data_as<uint8_t>();
    default: return 0;
  }
}

// Per-tensor parameters of a QuantizeLinear/DequantizeLinear node whose
// integer side has type `q` (int8/uint8), or false.
bool per_tensor(const Graph& g, const Node& n, DType q, int64_t opset, QParams* p) {
  if (q != DType::kInt8 && q != DType::kUInt8) return false;
  if (n.inputs.size() < 2 || n.inputs[1] < 0 || (opset >= 21 && n.attr_int("block_size", 0) != 0)) return false;
  if (n.op_type == "QuantizeLinear" && opset >= 23 && n.attr_int("precision", 0) != 0) return false;
  const auto& s = g.values[n.inputs[1]];
  if (!s.is_constant() || s.constant.dtype() != DType::kFloat32 || s.constant.numel() != 1) return false;
  p->scale = *s.constant.data_as<float>();
  p->type = q;
  p->zero = 0;
  if (n.inputs.size() > 2 && n.inputs[2] >= 0) {
    const auto& z = g.values[n.inputs[2]];
    if (!z.is_constant() || z.constant.numel() != 1 || z.constant.dtype() != q) return false;
    p->zero = scalar_int(z.constant);
  }
  return p->scale > 0.f;
}

}  // namespace

int int8_movement(Graph& g, const PassContext& ctx) {
  const std::vector<std::vector<int>> users = value_users(g);
  std::vector<char> dead(g.nodes.size(), 0);
  std::vector<size_t> ins;
  int moved = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& m = g.nodes[i];
    if (!data_inputs(m, &ins) || m.outputs.empty() || m.outputs[0] < 0) continue;
    bool ok = true;
    for (size_t k = 1; k < m.outputs.size(); ++k)  // MaxPool's indices: unused only
      if (m.outputs[k] >= 0 && (!users[m.outputs[k]].empty() || is_graph_output(g, m.outputs[k]))) ok = false;
    const int out = m.outputs[0];
    if (!ok || users[out].empty() || is_graph_output(g, out)) continue;
    // Every data input dequantized with the same parameters.
    QParams params;
    std::vector<int> quantized_inputs;
    for (size_t k : ins) {
      const int v = m.inputs[k];
      const int d = v >= 0 ? g.values[v].producer : -1;
      if (d < 0 || dead[d] || !g.nodes[d].domain.empty() || g.nodes[d].op_type != "DequantizeLinear") {
        ok = false;
        break;
      }
      const Node& dq = g.nodes[d];
      QParams p;
      if (!per_tensor(g, dq, g.values[dq.inputs[0]].dtype, ctx.opset, &p) || (k != ins.front() && !(p == params))) {
        ok = false;
        break;
      }
      params = p;
      quantized_inputs.push_back(dq.inputs[0]);
    }
    if (!ok) continue;
    // Every reader quantizes again with those parameters.
    for (int u : users[out]) {
      const Node& q = g.nodes[u];
      QParams p;
      if (dead[u] || !q.domain.empty() || q.op_type != "QuantizeLinear" || q.inputs[0] != out ||
          q.outputs.empty() || is_graph_output(g, q.outputs[0]) ||
          !per_tensor(g, q, g.values[q.outputs[0]].dtype, ctx.opset, &p) || !(p == params)) {
        ok = false;
        break;
      }
    }
    if (!ok) continue;
    for (size_t j = 0; j < ins.size(); ++j) g.nodes[i].inputs[ins[j]] = quantized_inputs[j];
    g.values[out].dtype = params.type;
    for (int u : users[out]) {
      dead[u] = 1;
      replace_uses(g, g.nodes[u].outputs[0], out);
    }
    ++moved;
  }
  if (moved) {
    erase_nodes(g, dead);
    g.topo_sort();
    g.remove_dead();
    ctx.note("int8 movement: " + std::to_string(moved) + " ops run on int8 (their DequantizeLinear/QuantizeLinear pairs dropped)");
  }
  return moved;
}

}  // namespace twinfer::passes
