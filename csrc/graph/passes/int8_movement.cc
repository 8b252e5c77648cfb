#include "graph/passes/int8_movement.h"

#include <vector>

#include "graph/passes/qdq_util.h"
#include "graph/passes/rewrite_util.h"

namespace twinfer::passes {

namespace {

using graph::Graph;
using graph::Node;

// Ops that only move or select values, and which of their inputs carry data.
bool data_inputs(const Node& n, std::vector<size_t>* ins) {
  if (!n.domain.empty() || n.inputs.empty()) return false;
  static const char* kFirstInputOnly[] = {"Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Identity",
                                          "Gather", "Slice", "Expand", "DepthToSpace", "SpaceToDepth"};
  // Not MaxPool: its int8 kernel is a plain loop, ~8x slower on ResNet-50's
  // stem than the float path even with the dequantize and quantize around it.
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
    for (size_t k = 1; k < m.outputs.size(); ++k)  // extra outputs: unused only
      if (m.outputs[k] >= 0 && (!users[m.outputs[k]].empty() || is_graph_output(g, m.outputs[k]))) ok = false;
    const int out = m.outputs[0];
    if (!ok || users[out].empty() || is_graph_output(g, out)) continue;
    // Every data input dequantized with the same parameters.
    QParams params;
    std::vector<int> quantized_inputs;
    for (size_t k : ins) {
      QParams p;
      const Node* dq = per_tensor_dequantize(g, m.inputs[k], ctx.opset, &p, &dead);
      if (!dq || (k != ins.front() && !(p == params))) {
        ok = false;
        break;
      }
      params = p;
      quantized_inputs.push_back(dq->inputs[0]);
    }
    if (!ok) continue;
    // Every reader quantizes again with those parameters.
    for (int u : users[out]) {
      const Node& q = g.nodes[u];
      QParams p;
      if (dead[u] || !q.domain.empty() || q.op_type != "QuantizeLinear" || q.inputs[0] != out ||
          q.outputs.empty() || is_graph_output(g, q.outputs[0]) ||
          !per_tensor_qparams(g, q, g.values[q.outputs[0]].dtype, ctx.opset, &p) || !(p == params)) {
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
