#include "graph/passes/legacy_forms.h"

#include <set>
#include <string>
#include <vector>

#include "graph/passes/rewrite_util.h"

namespace twinfer::passes {

namespace {

bool is_legacy_binary(const graph::Node& n) {
  static const std::set<std::string> ops{"Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal", "Greater",
                                         "Less"};
  return n.domain.empty() && ops.count(n.op_type) && n.inputs.size() == 2;
}

// The rank of v when declared (a graph input, an initializer, value_info); -1 otherwise.
int64_t declared_rank(const graph::Graph& g, int v) {
  if (v < 0) return -1;
  const graph::Value& val = g.values[v];
  if (val.is_constant()) return static_cast<int64_t>(val.constant.shape().size());
  return val.has_shape ? static_cast<int64_t>(val.shape.size()) : -1;
}

}  // namespace

int rewrite_legacy_forms(graph::Graph& g, int64_t opset) {
  if (opset >= 7) return 0;
  int count = 0;
  for (auto& n : g.nodes)
    for (auto& kv : n.attrs) {
      if (kv.second.g) count += rewrite_legacy_forms(*kv.second.g, opset);
      for (auto& sg : kv.second.graphs) count += rewrite_legacy_forms(*sg, opset);
    }
  std::vector<graph::Node> added;
  for (auto& n : g.nodes) {
    if (opset < 5 && n.domain.empty() && n.op_type == "Reshape" && n.inputs.size() == 1 && n.has_attr("shape")) {
      const std::vector<int64_t> shape = n.attr_ints("shape");
      Tensor t = Tensor::empty(DType::kInt64, {static_cast<int64_t>(shape.size())});
      for (size_t i = 0; i < shape.size(); ++i) t.data_as<int64_t>()[i] = shape[i];
      n.inputs.push_back(add_constant(g, (n.name.empty() ? "reshape" : n.name) + "/shape", std::move(t)));
      n.attrs.erase("shape");
      ++count;
      continue;
    }
    if (!is_legacy_binary(n) || n.attr_int("broadcast", 0) == 0 || !n.has_attr("axis")) {
      if (is_legacy_binary(n)) n.attrs.erase("broadcast");
      continue;
    }
    const int64_t ra = declared_rank(g, n.inputs[0]), rb = declared_rank(g, n.inputs[1]);
    if (ra < 0 || rb < 0)
      throw Error(ErrorKind::kUnsupportedOp,
                  "broadcast=1 with axis (opset " + std::to_string(opset) + ") lines B up from A's dim axis, which "
                  "needs the ranks of both inputs; '" + (ra < 0 ? g.values[n.inputs[0]].name : g.values[n.inputs[1]].name) +
                  "' has none declared", n.name, n.op_type);
    int64_t axis = n.attr_int("axis", 0);
    if (axis < 0) axis += ra;
    if (axis < 0 || axis + rb > ra)
      throw Error(ErrorKind::kShape, "broadcast axis " + std::to_string(n.attr_int("axis", 0)) + " does not fit A of rank " +
                                         std::to_string(ra) + " and B of rank " + std::to_string(rb), n.name, n.op_type);
    n.attrs.erase("broadcast");
    n.attrs.erase("axis");
    if (axis + rb == ra) continue;  // B already lines up with A's trailing dims
    std::vector<int64_t> axes;
    for (int64_t d = rb; d < ra - axis; ++d) axes.push_back(d);
    const int b = n.inputs[1];
    const int lined_up = add_value(g, g.values[b].name + "@axis" + std::to_string(axis));
    graph::Node u;
    u.name = (n.name.empty() ? n.op_type : n.name) + "/broadcast_axis";
    u.op_type = "Unsqueeze";
    u.inputs = {b};
    u.outputs = {lined_up};
    u.attrs["axes"] = ints_attr(axes);  // Unsqueeze-1: axes an attribute
    added.push_back(std::move(u));
    n.inputs[1] = lined_up;
    ++count;
  }
  if (!added.empty()) {
    for (auto& u : added) g.nodes.push_back(std::move(u));
    g.topo_sort();
  }
  return count;
}

}  // namespace twinfer::passes
