#include "graph/passes/int8_movement.h"

#include <algorithm>
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
  ins->clear();
  // MaxPool selects values too, where the scale is positive (checked by the
  // caller): its int8 kernel is oneDNN's since the plain loop (~8x slower on
  // ResNet-50's stem than the float path) gave way.
  if (n.op_type == "MaxPool") {
    ins->push_back(0);
    return true;
  }
  if (n.op_type == "Pad") {  // constant mode only: the fill becomes the zero point (pad_fill_on_int8)
    if (n.attr_string("mode", "constant") != "constant") return false;
    ins->push_back(0);
    return true;
  }
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

// A constant-mode Pad moved onto integers must fill with the integer that
// stands for its float fill: only a fill of 0 (absent, or a constant 0),
// which quantizes exactly to the zero point. Sets that fill; false (nothing
// changed) for any other fill or for opsets before 11 (pads as attributes).
bool pad_fill_on_int8(Graph& g, size_t i, const QParams& p, int64_t opset) {
  const Node& pad = g.nodes[i];
  if (opset < 11) return false;
  if (pad.inputs.size() > 2 && pad.inputs[2] >= 0) {
    const auto& v = g.values[pad.inputs[2]];
    QParams fp;
    const Node* dq = per_tensor_dequantize(g, pad.inputs[2], opset, &fp);
    if (dq) {  // onnxruntime quantizes the fill too: DQ(q) is 0 exactly when q is its zero point
      const auto& q = g.values[dq->inputs[0]];
      const int qp = q.producer;
      if (q.is_constant()) {
        if (q.constant.numel() != 1) return false;
        const int64_t qv = q.constant.dtype() == DType::kUInt8 ? *q.constant.data_as<uint8_t>()
                                                               : *q.constant.data_as<int8_t>();
        if (qv != fp.zero) return false;
      } else if (qp >= 0 && g.nodes[qp].domain.empty() && g.nodes[qp].op_type == "QuantizeLinear") {
        // ... or DQ(Q(c)) before constant folding: 0 when c is 0 and both use one zero point.
        const Node& qn = g.nodes[qp];
        QParams qq;
        const auto& c = g.values[qn.inputs[0]];
        if (!per_tensor_qparams(g, qn, q.dtype, opset, &qq) || qq.zero != fp.zero || !c.is_constant() ||
            c.constant.numel() != 1 || c.constant.dtype() != DType::kFloat32 || *c.constant.data_as<float>() != 0.f)
          return false;
      } else {
        return false;
      }
    } else if (!v.is_constant() || v.constant.numel() != 1 || v.constant.dtype() != DType::kFloat32 ||
               *v.constant.data_as<float>() != 0.f) {
      return false;
    }
  }
  Tensor fill = Tensor::empty(p.type, {});
  if (p.type == DType::kUInt8) *fill.data_as<uint8_t>() = static_cast<uint8_t>(p.zero);
  else *fill.data_as<int8_t>() = static_cast<int8_t>(p.zero);
  const int fv = add_constant(g, pad.name + "_int8_fill", std::move(fill));
  g.nodes[i].inputs.resize(std::max<size_t>(g.nodes[i].inputs.size(), 3), -1);
  g.nodes[i].inputs[2] = fv;
  return true;
}

// Whether every reader of `out` is a per-tensor QuantizeLinear of it with
// one set of parameters (set in *params), none a graph output or dead;
// *first: the first such reader. False for a value nobody reads.
bool read_only_by_alike_quantizes(const Graph& g, const std::vector<std::vector<int>>& users, int out,
                                  const std::vector<char>& dead, int64_t opset, QParams* params, int* first) {
  *first = -1;
  for (int u : users[out]) {
    const Node& q = g.nodes[u];
    QParams p;
    if (dead[u] || !q.domain.empty() || q.op_type != "QuantizeLinear" || q.inputs[0] != out || q.outputs.empty() ||
        q.outputs[0] < 0 || is_graph_output(g, q.outputs[0]) ||
        !per_tensor_qparams(g, q, g.values[q.outputs[0]].dtype, opset, &p) || (*first >= 0 && !(p == *params)))
      return false;
    *params = p;
    if (*first < 0) *first = u;
  }
  return *first >= 0;
}

// `out` (now of the integer type) takes the place of its QuantizeLinear
// readers' outputs; the readers are marked dead.
void drop_quantize_readers(Graph& g, const std::vector<std::vector<int>>& users, int out, DType type,
                           std::vector<char>* dead) {
  g.values[out].dtype = type;
  for (int u : users[out]) {
    (*dead)[u] = 1;
    replace_uses(g, g.nodes[u].outputs[0], out);
  }
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
    QParams again;
    int first = -1;
    if (!read_only_by_alike_quantizes(g, users, out, dead, ctx.opset, &again, &first) || !(again == params)) continue;
    // A negative scale reverses the order: the largest float is the smallest integer.
    if (g.nodes[i].op_type == "MaxPool" && !(params.scale > 0.f)) continue;
    if (g.nodes[i].op_type == "Pad" && !pad_fill_on_int8(g, i, params, ctx.opset)) continue;
    for (size_t j = 0; j < ins.size(); ++j) g.nodes[i].inputs[ins[j]] = quantized_inputs[j];
    drop_quantize_readers(g, users, out, params.type, &dead);
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

int quantize_before_maxpool(Graph& g, const PassContext& ctx) {
  const std::vector<std::vector<int>> users = value_users(g);
  std::vector<char> dead(g.nodes.size(), 0);
  std::vector<Node> added;
  int moved = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& m = g.nodes[i];
    if (!m.domain.empty() || m.op_type != "MaxPool" || m.inputs.empty() || m.inputs[0] < 0 || m.outputs.empty() ||
        m.outputs[0] < 0)
      continue;
    const int x = m.inputs[0], out = m.outputs[0];
    const DType xt = g.values[x].dtype;
    if (xt != DType::kFloat32 && xt != DType::kFloat16 && xt != DType::kBFloat16) continue;
    // x read by the MaxPool alone: the op before it then takes the
    // QuantizeLinear into its output (fuse_qdq); with other float readers x
    // stays float and the move would only quantize a tensor 4x larger.
    bool ok = !users[out].empty() && !is_graph_output(g, out) && users[x].size() == 1 && !is_graph_output(g, x);
    for (size_t k = 1; k < m.outputs.size(); ++k)  // the Indices output: unused only
      if (m.outputs[k] >= 0 && (!users[m.outputs[k]].empty() || is_graph_output(g, m.outputs[k]))) ok = false;
    // Every reader a per-tensor QuantizeLinear with one set of parameters,
    // its scale positive (a negative one would turn the maximum into the minimum).
    QParams params;
    int first = -1;
    if (!ok || !read_only_by_alike_quantizes(g, users, out, dead, ctx.opset, &params, &first) ||
        !(params.scale > 0.f))
      continue;
    // x -> QuantizeLinear (the first reader's, moved) -> MaxPool on integers.
    Node q = g.nodes[first];
    q.name = m.name + "/quantized_input";
    q.inputs[0] = x;
    const int xq = add_value(g, g.values[x].name + "_quantized");
    g.values[xq].dtype = params.type;
    g.values[xq].has_shape = g.values[x].has_shape;
    g.values[xq].shape = g.values[x].shape;
    q.outputs = {xq};
    added.push_back(std::move(q));
    g.nodes[i].inputs[0] = xq;
    drop_quantize_readers(g, users, out, params.type, &dead);
    ++moved;
  }
  if (moved) {
    replace_fused_nodes(g, dead, added);
    ctx.note("int8 MaxPool: " + std::to_string(moved) +
             " moved after the QuantizeLinear that read them (the same integers, pooled in int8)");
  }
  return moved;
}

}  // namespace twinfer::passes
