#include "graph/passes/int8_channels_last.h"

#include <map>

#include "core/error.h"
#include "graph/domains.h"
#include "graph/passes/rewrite_util.h"
#include "ops/quant/qbinary.h"
#include "ops/quant/qlinear_fused.h"

namespace twinfer::passes {

namespace {

bool is_qconv(const graph::Node& n) { return n.domain == kTwinferDomain && n.op_type == quant::kQConvOp; }

bool is_int8(const graph::Value& v) { return v.dtype == DType::kInt8 || v.dtype == DType::kUInt8; }

// A QBinary whose two inputs and output have one shape: it works element by
// element on the bytes as they lie, so it runs on NHWC bytes unchanged when
// all three are NHWC.
bool layout_free(const graph::Graph& g, const graph::Node& n) {
  if (n.domain != kTwinferDomain || n.op_type != quant::kQBinaryOp || n.outputs.empty() || n.outputs[0] < 0)
    return false;
  const int a = n.inputs[quant::kQbA], b = n.inputs[quant::kQbB], y = n.outputs[0];
  if (a < 0 || b < 0) return false;
  const graph::Value &va = g.values[a], &vb = g.values[b], &vy = g.values[y];
  return va.has_shape && vb.has_shape && vy.has_shape && va.shape == vy.shape && vb.shape == vy.shape;
}

// An int8 MaxPool (rank 4, no Indices output) pools NHWC bytes as well as
// NCHW ones when marked channels_last_storage (ops/nn/pool.h): its input
// and output then join one group, as a QBinary's do. ResNet's stem QConv ->
// MaxPool -> layer1's QConvs stay NHWC through it.
bool pools_any_layout(const graph::Graph& g, const graph::Node& n) {
  if (!n.domain.empty() || n.op_type != "MaxPool" || n.inputs.empty() || n.inputs[0] < 0 || n.outputs.empty() ||
      n.outputs[0] < 0 || (n.outputs.size() > 1 && n.outputs[1] >= 0))
    return false;
  const graph::Value &x = g.values[n.inputs[0]], &y = g.values[n.outputs[0]];
  return is_int8(x) && x.has_shape && x.shape.size() == 4 && y.has_shape && y.shape.size() == 4;
}

void set_flag(graph::Node& n, const char* name) {
  graph::Attribute a;
  a.type = graph::Attribute::Type::kInt;
  a.i = 1;
  n.attrs[name] = a;
}

// The readers' side of a kept value: QConvs read it as x only.
bool reads_only_as_x(const graph::Node& r, int v) {
  if (r.inputs.empty() || r.inputs[quant::kQX] != v) return false;
  for (size_t k = 0; k < r.inputs.size(); ++k)
    if (k != quant::kQX && r.inputs[k] == v) return false;
  return true;
}

}  // namespace

int int8_channels_last(graph::Graph& g, const PassContext& ctx) {
  // oneDNN's int8 convolutions and the CUDA ones (backends/cuda/gemm_qlinear.cc,
  // whose GEMM writes positions x channels) both read and write NHWC as it is.
  if (ctx.backend != Backend::kCPU && ctx.backend != Backend::kCUDA) return 0;
  const auto users = value_users(g);
  const size_t nv = g.values.size();

  // Values joined by layout-free QBinarys form one group, NHWC or not as a
  // whole: a ResNet's residual spine is one group from its first Add to its last.
  UnionFind groups(nv);
  std::vector<char> free_node(g.nodes.size(), 0);
  std::vector<char> pool_node(g.nodes.size(), 0);  // free nodes that are MaxPools (marked when kept)
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const graph::Node& n = g.nodes[i];
    if (pools_any_layout(g, n)) {
      free_node[i] = pool_node[i] = 1;
      groups.join(n.inputs[0], n.outputs[0]);
      continue;
    }
    if (!layout_free(g, n)) continue;
    free_node[i] = 1;
    groups.join(n.inputs[quant::kQbA], n.outputs[0]);
    groups.join(n.inputs[quant::kQbB], n.outputs[0]);
  }

  // Per group: whether it can be NHWC, and what it gains and costs. Every
  // value must be an int8 tensor with a shape, made by a QConv or by the
  // group's own QBinarys; a reader that is neither a QConv (reading it as
  // x) nor such a QBinary gets the value back in NCHW through a Reshape and
  // a Transpose (rank 4 with C, H, W known), one per value. A group is kept
  // when its QConv ends (writes and reads that skip a reorder or, on CUDA,
  // an im2col gather and a scattered epilogue) are more than twice those
  // conversions (full copies of a tensor each).
  struct Group {
    bool ok = true;
    int qconv_ends = 0, conversions = 0;
    std::vector<int> values;
  };
  std::map<int, Group> by_root;
  std::vector<char> needs_nchw(nv, 0);  // a reader outside wants NCHW
  for (size_t v = 0; v < nv; ++v) {
    const graph::Value& val = g.values[v];
    if (val.producer < 0) continue;
    const graph::Node& p = g.nodes[val.producer];
    const bool from_qconv = is_qconv(p) && p.outputs[0] == static_cast<int>(v);
    const bool from_free = free_node[val.producer] != 0;
    if (!from_qconv && !from_free) continue;  // only QConv / QBinary outputs start or join a group
    Group& grp = by_root[groups.find(static_cast<int>(v))];
    grp.values.push_back(static_cast<int>(v));
    if (!is_int8(val) || !val.has_shape || val.shape.size() < 3 || val.shape.size() > 5 || is_graph_output(g, v) ||
        users[v].empty()) {
      grp.ok = false;
      continue;
    }
    grp.qconv_ends += from_qconv;
    for (int u : users[v]) {
      const graph::Node& r = g.nodes[u];
      if (is_qconv(r) && reads_only_as_x(r, static_cast<int>(v))) {
        ++grp.qconv_ends;
      } else if (!free_node[u]) {
        needs_nchw[v] = 1;
      }
    }
    if (needs_nchw[v]) {
      const SymShape& s = val.shape;
      const bool convertible = s.size() == 4 && s[1].known() && s[2].known() && s[3].known();
      if (!convertible) grp.ok = false;
      ++grp.conversions;
    }
  }
  // A group must hold every input and output of its QBinarys and MaxPools
  // (an input made by something else, a graph input or a constant, is not NHWC).
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!free_node[i]) continue;
    const graph::Node& n = g.nodes[i];
    const std::vector<int> ins = pool_node[i] ? std::vector<int>{n.inputs[0]}
                                              : std::vector<int>{n.inputs[quant::kQbA], n.inputs[quant::kQbB]};
    for (int v : ins) {
      const int p = g.values[v].producer;
      const bool made_here = p >= 0 && (free_node[p] || (is_qconv(g.nodes[p]) && g.nodes[p].outputs[0] == v));
      if (!made_here) by_root[groups.find(v)].ok = false;
    }
  }

  std::vector<char> keep(nv, 0);
  int kept = 0, converted = 0;
  for (auto& [root, grp] : by_root) {
    if (!grp.ok || grp.qconv_ends <= 2 * grp.conversions) continue;
    for (int v : grp.values) keep[v] = 1;
    kept += static_cast<int>(grp.values.size());
  }
  if (!kept) return 0;

  std::vector<graph::Node> nodes;
  nodes.reserve(g.nodes.size() + 8);
  std::map<int, int> nchw_twin;  // kept value -> its NCHW copy
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    graph::Node n = g.nodes[i];
    if (pool_node[i] && keep[n.outputs[0]]) set_flag(n, "channels_last_storage");
    if (is_qconv(n)) {
      if (n.outputs[0] >= 0 && keep[n.outputs[0]]) set_flag(n, "y_channels_last");
      const int x = n.inputs[quant::kQX];
      if (x >= 0 && keep[x] && reads_only_as_x(n, x)) set_flag(n, "x_channels_last");
    }
    // Every other reading of a kept value takes its NCHW copy (a QConv's x,
    // marked above, and the group's own QBinarys read the NHWC bytes).
    for (size_t k = 0; k < n.inputs.size() && !free_node[i]; ++k) {
      int& v = n.inputs[k];
      if (v < 0 || !keep[v] || (is_qconv(n) && k == quant::kQX && reads_only_as_x(n, v))) continue;
      const auto twin = nchw_twin.find(v);
      if (twin == nchw_twin.end())  // a reader before its producer: the graph is not in order
        throw Error(ErrorKind::kRuntime, "int8_channels_last: '" + g.values[v].name + "' read before it is made");
      v = twin->second;
    }
    nodes.push_back(n);
    // After a kept value's producer: its NCHW copy for the readers outside.
    for (int y : g.nodes[i].outputs) {
      if (y < 0 || !keep[y] || !needs_nchw[y]) continue;
      // A copy: add_constant / add_value below may move g.values.
      const SymShape s = g.values[y].shape;  // [N, C, H, W], the bytes NHWC
      const std::string base = g.values[y].name;
      Tensor dims = Tensor::empty(DType::kInt64, {4});
      int64_t* d = dims.data_as<int64_t>();
      d[0] = 0, d[1] = s[2].value, d[2] = s[3].value, d[3] = s[1].value;  // 0: Reshape keeps N
      const int shape_v = add_constant(g, base + "@nhwc_dims", std::move(dims));
      const int as_nhwc = add_value(g, base + "@nhwc");
      const int back = add_value(g, base + "@nchw");
      for (int id : {as_nhwc, back}) {
        g.values[id].dtype = g.values[y].dtype;
        g.values[id].has_shape = true;
      }
      g.values[as_nhwc].shape = {s[0], s[2], s[3], s[1]};
      g.values[back].shape = s;
      graph::Node reshape;
      reshape.name = base + "@nhwc_view";
      reshape.op_type = "Reshape";
      reshape.inputs = {y, shape_v};
      reshape.outputs = {as_nhwc};
      nodes.push_back(reshape);
      nodes.push_back(transpose_node(base + "@to_nchw", as_nhwc, back, {0, 3, 1, 2}));
      nchw_twin[y] = back;
      ++converted;
    }
  }
  g.nodes = std::move(nodes);
  g.topo_sort();  // the producer links, for the conversions' nodes
  ctx.note("int8_channels_last: " + std::to_string(kept) + " QConv / QBinary / MaxPool outputs stay NHWC" +
           (converted ? ", " + std::to_string(converted) + " turned back to NCHW for other readers" : ""));
  return kept;
}

}  // namespace twinfer::passes
