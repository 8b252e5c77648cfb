#include "graph/passes/eliminate_identity.h"

#include "graph/passes/rewrite_util.h"

namespace twinfer::passes {

static bool is_identity_like(const graph::Graph& g, const graph::Node& n) {
  if (!n.domain.empty()) return false;
  if (n.inputs.empty() || n.inputs[0] < 0 || n.outputs.empty() || n.outputs[0] < 0) return false;
  if (n.op_type == "Identity") return true;
  if (n.op_type == "Dropout") {
    // Inference mode: the mask output must be unused (or absent).
    return n.outputs.size() < 2 || n.outputs[1] < 0;
  }
  if (n.op_type == "Cast") {
    const auto& in = g.values[n.inputs[0]];
    const auto& out = g.values[n.outputs[0]];
    return in.dtype != DType::kUndefined && in.dtype == out.dtype;
  }
  return false;
}

// Whether every value of `from` is a value of `to`: Cast(Cast(x, to), from)
// gives x back.
static bool widens_exactly(DType from, DType to) {
  switch (from) {
    case DType::kFloat16:
    case DType::kBFloat16:
      return to == DType::kFloat32 || to == DType::kFloat64;
    case DType::kFloat32:
      return to == DType::kFloat64;
    case DType::kInt8:
      return to == DType::kInt16 || to == DType::kInt32 || to == DType::kInt64;
    case DType::kInt16:
      return to == DType::kInt32 || to == DType::kInt64;
    case DType::kInt32:
      return to == DType::kInt64;
    case DType::kUInt8:
      return to == DType::kUInt16 || to == DType::kUInt32 || to == DType::kUInt64 || to == DType::kInt16 ||
             to == DType::kInt32 || to == DType::kInt64;
    case DType::kUInt16:
      return to == DType::kUInt32 || to == DType::kUInt64 || to == DType::kInt32 || to == DType::kInt64;
    case DType::kUInt32:
      return to == DType::kUInt64 || to == DType::kInt64;
    default:
      return false;
  }
}

// x for Cast(Cast(x, wider), x's type), a round trip through a type that
// holds every value of x's exactly (TorchScript exports softmax(s,
// dtype=float32).to(float16) of a float16 s as Softmax then that round
// trip); else -1.
static int round_trip_source(const graph::Graph& g, const graph::Node& n) {
  if (!n.domain.empty() || n.op_type != "Cast" || n.inputs.empty() || n.inputs[0] < 0 || n.outputs.empty() ||
      n.outputs[0] < 0)
    return -1;
  const int p = g.values[n.inputs[0]].producer;
  if (p < 0) return -1;
  const graph::Node& inner = g.nodes[p];
  if (!inner.domain.empty() || inner.op_type != "Cast" || inner.inputs.empty() || inner.inputs[0] < 0) return -1;
  const int x = inner.inputs[0];
  const DType from = g.values[x].dtype, mid = g.values[n.inputs[0]].dtype, to = g.values[n.outputs[0]].dtype;
  return from != DType::kUndefined && from == to && widens_exactly(from, mid) ? x : -1;
}

int eliminate_identity(graph::Graph& g, const PassContext& ctx) {
  std::vector<char> dead(g.nodes.size(), 0);
  int removed = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const auto& n = g.nodes[i];
    const int source = round_trip_source(g, n);
    if (source < 0 && !is_identity_like(g, n)) continue;
    int in = source >= 0 ? source : n.inputs[0], out = n.outputs[0];
    if (is_graph_output(g, out)) continue;
    replace_uses(g, out, in);
    dead[i] = 1;
    ++removed;
  }
  if (removed) {
    erase_nodes(g, dead);
    ctx.note("eliminate_identity: removed " + std::to_string(removed) + " nodes");
  }
  return removed;
}

}  // namespace twinfer::passes
