#include "graph/passes/fuse_residual.h"

#include <cstdlib>
#include <cstring>

#include "graph/domains.h"
#include "graph/passes/pass_switch.h"
#include "graph/passes/rewrite_util.h"

namespace twinfer::passes {

namespace {

bool float_dtype(DType d) { return d == DType::kFloat32 || d == DType::kFloat16 || d == DType::kBFloat16; }

bool same_known_shape(const graph::Graph& g, int a, int b) {
  Shape sa, sb;
  return concrete_shape(g, a, &sa) && concrete_shape(g, b, &sb) && sa == sb;
}

// A MatMul whose output may take a residual: ai.onnx's, or com.twinfer's
// with no activation and no residual yet.
bool open_matmul(const graph::Node& n) {
  if (n.op_type != "MatMul" || n.outputs.size() != 1) return false;
  if (n.domain.empty()) return n.inputs.size() == 2;
  if (n.domain != kTwinferDomain || n.inputs.size() > 3) return false;
  return n.attr_string("activation", "").empty();
}

}  // namespace

bool residual_fusion_wanted() { return pass_enabled("TWINFER_FUSE_RESIDUAL"); }

int fuse_residual(graph::Graph& g, const FuseResidualOptions& o, const PassContext& ctx) {
  const std::vector<std::vector<int>> users = value_users(g);
  std::vector<char> dead(g.nodes.size(), 0);
  int fused = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const graph::Node& mm = g.nodes[i];
    if (dead[i] || !open_matmul(mm)) continue;
    const int y = mm.outputs[0];
    if (y < 0 || !float_dtype(g.values[y].dtype) || is_graph_output(g, y) || users[y].size() != 1) continue;
    const int ai = users[y][0];
    const graph::Node& add = g.nodes[ai];
    if (dead[ai] || !add.domain.empty() || add.op_type != "Add" || add.inputs.size() != 2 || add.outputs.size() != 1)
      continue;
    const int r = add.inputs[0] == y ? add.inputs[1] : add.inputs[0];
    if (r == y || r < 0 || g.values[r].dtype != g.values[y].dtype || !same_known_shape(g, r, y) ||
        !same_known_shape(g, add.outputs[0], y))
      continue;
    graph::Node f = mm;
    f.domain = kTwinferDomain;
    f.inputs.resize(3, -1);
    f.inputs.push_back(r);
    f.outputs[0] = add.outputs[0];
    if (f.name.empty()) f.name = add.name;
    if (!one_node_accepted(g, f, o.supports)) continue;
    g.nodes[i] = std::move(f);
    dead[ai] = 1;
    ++fused;
  }
  if (!fused) return 0;
  erase_nodes(g, dead);
  g.topo_sort();  // a residual computed after the MatMul now comes before it
  ctx.note("fuse_residual: " + std::to_string(fused) + " MatMul + Add(residual) -> com.twinfer::MatMul");
  return fused;
}

}  // namespace twinfer::passes
