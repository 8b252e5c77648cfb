#include "graph/passes/widen_precision.h"

#include <map>

#include "core/half.h"
#include "graph/passes/rewrite_util.h"

namespace twinfer::passes {

namespace {

bool is_16bit_float(DType t) { return t == DType::kFloat16 || t == DType::kBFloat16; }

bool has_subgraph(const graph::Node& n) {
  for (const auto& kv : n.attrs)
    if (kv.second.g || !kv.second.graphs.empty()) return true;
  return false;
}

Tensor widened(const Tensor& t) {
  Tensor out = Tensor::empty(DType::kFloat32, t.shape());
  const uint16_t* src = static_cast<const uint16_t*>(t.data());
  float* dst = out.data_as<float>();
  const bool half = t.dtype() == DType::kFloat16;
  for (int64_t i = 0; i < t.numel(); ++i) dst[i] = half ? half_to_float(src[i]) : bf16_to_float(src[i]);
  return out;
}

}  // namespace

int widen_to_float32(graph::Graph& g, const NodeSupport& supports) {
  // The node's float32 form, asked of its kernels.
  auto as_float32 = [](graph::Value& v) {
    if (!is_16bit_float(v.dtype)) return;
    v.dtype = DType::kFloat32;
    if (v.is_constant()) v.constant = widened(v.constant);
  };
  auto is_16 = [&](int v) { return v >= 0 && is_16bit_float(g.values[v].dtype); };
  std::vector<char> widen(g.nodes.size(), 0);
  int count = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const graph::Node& n = g.nodes[i];
    if (has_subgraph(n) || (n.domain.empty() && (n.op_type == "Cast" || n.op_type == "CastLike"))) continue;
    bool touches = false;
    for (int v : n.inputs) touches = touches || is_16(v);
    for (int v : n.outputs) touches = touches || is_16(v);
    if (!touches || one_node_accepted(g, n, supports) || !one_node_accepted(g, n, supports, as_float32)) continue;
    widen[i] = 1;
    ++count;
  }
  if (!count) return 0;

  std::map<int, int> as_f32;  // a 16-bit value -> its float32 twin
  std::vector<graph::Node> nodes;
  nodes.reserve(g.nodes.size() + 3 * count);
  auto float_twin = [&](int v) {
    auto it = as_f32.find(v);
    if (it != as_f32.end()) return it->second;
    int id;
    if (g.values[v].is_constant()) {
      id = add_constant(g, g.values[v].name + "@float32", widened(g.values[v].constant));
    } else {
      id = add_value(g, g.values[v].name + "@float32");
      nodes.push_back(cast_node(g.values[id].name, v, id, DType::kFloat32));
    }
    g.values[id].dtype = DType::kFloat32;
    g.values[id].has_shape = g.values[v].has_shape;
    g.values[id].shape = g.values[v].shape;
    as_f32[v] = id;
    return id;
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    graph::Node n = std::move(g.nodes[i]);
    if (!widen[i]) {
      nodes.push_back(std::move(n));
      continue;
    }
    for (int& v : n.inputs)
      if (is_16(v)) v = float_twin(v);
    std::vector<graph::Node> back;
    for (int& v : n.outputs) {
      if (!is_16(v)) continue;
      const int wide = add_value(g, g.values[v].name + "@float32");
      g.values[wide].dtype = DType::kFloat32;
      g.values[wide].has_shape = g.values[v].has_shape;
      g.values[wide].shape = g.values[v].shape;
      back.push_back(cast_node(g.values[v].name + "@back", wide, v, g.values[v].dtype));
      v = wide;
    }
    nodes.push_back(std::move(n));
    for (auto& c : back) nodes.push_back(std::move(c));
  }
  g.nodes = std::move(nodes);
  g.topo_sort();
  return count;
}

}  // namespace twinfer::passes
