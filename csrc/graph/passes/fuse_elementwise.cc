#include "graph/passes/fuse_elementwise.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "core/half.h"
#include "graph/domains.h"
#include "graph/passes/pass_switch.h"
#include "graph/passes/rewrite_util.h"
#include "ops/elementwise/fused_chain_node.h"

namespace twinfer::passes {

using ew::ChainOp;

bool elementwise_fusion_wanted() { return pass_enabled("TWINFER_FUSE_ELEMENTWISE"); }

namespace {

bool chain_dtype(DType d) { return d == DType::kFloat32 || d == DType::kFloat16 || d == DType::kBFloat16; }

// A one-element float constant's value (Clip's bounds in any float dtype).
bool scalar_float(const graph::Graph& g, int v, float* out) {
  if (v < 0 || !g.values[v].is_constant()) return false;
  const Tensor& t = g.values[v].constant;
  if (t.numel() != 1) return false;
  uint16_t bits = 0;
  switch (t.dtype()) {
    case DType::kFloat32: *out = *t.data_as<float>(); return true;
    case DType::kFloat16: std::memcpy(&bits, t.data(), 2); *out = half_to_float(bits); return true;
    case DType::kBFloat16: std::memcpy(&bits, t.data(), 2); *out = bf16_to_float(bits); return true;
    default: return false;
  }
}

// A node as one step of a chain: its op, the inputs the step reads (the
// rest are attributes folded into params), and its params.
struct StepOf {
  bool ok = false;
  ChainOp op = ChainOp::kAdd;
  std::vector<int> data;
  float p0 = 0.f, p1 = 0.f;
};

StepOf step_of(const graph::Graph& g, const graph::Node& n, int64_t opset) {
  StepOf s;
  if (!n.domain.empty() || n.outputs.size() != 1 || n.outputs[0] < 0 || n.inputs.empty()) return s;
  std::string name = n.op_type;
  if (name == "PRelu" && opset < 7) return s;  // its slope may be per channel (ew::prelu_slope_shape)
  if (name == "GeluTanh") return s;  // our spelling only, not an ONNX op
  if (name == "Gelu") {
    const std::string approx = n.attr_string("approximate", "none");
    if (approx != "none" && approx != "tanh") return s;
    if (approx == "tanh") name = "GeluTanh";
  }
  if (!ew::chain_op_from_name(name, &s.op)) return s;
  const size_t operands = ew::chain_binary(s.op) ? 2 : 1;
  if (s.op == ChainOp::kClip) {
    s.p0 = n.attr_float("min", -std::numeric_limits<float>::infinity());
    s.p1 = n.attr_float("max", std::numeric_limits<float>::infinity());
    for (size_t i = 1; i < n.inputs.size(); ++i)
      if (n.inputs[i] >= 0 && !scalar_float(g, n.inputs[i], i == 1 ? &s.p0 : &s.p1)) return s;
  } else if (n.inputs.size() != operands) {
    return s;  // Max/Min of one or three operands
  }
  switch (s.op) {
    case ChainOp::kLeakyRelu: s.p0 = n.attr_float("alpha", 0.01f); break;
    case ChainOp::kElu:
    case ChainOp::kCelu:
    case ChainOp::kThresholdedRelu: s.p0 = n.attr_float("alpha", 1.0f); break;
    case ChainOp::kSelu:
      s.p0 = n.attr_float("alpha", 1.67326319217681884765625f);
      s.p1 = n.attr_float("gamma", 1.05070102214813232421875f);
      break;
    case ChainOp::kHardSigmoid:
      s.p0 = n.attr_float("alpha", 0.2f);
      s.p1 = n.attr_float("beta", 0.5f);
      break;
    default: break;
  }
  const graph::Value& out = g.values[n.outputs[0]];
  if (!chain_dtype(out.dtype) || !out.has_shape || !sym_shape_known(out.shape)) return s;
  for (size_t i = 0; i < operands; ++i) {
    const int v = n.inputs[i];
    if (v < 0 || g.values[v].dtype != out.dtype || !g.values[v].has_shape || !sym_shape_known(g.values[v].shape))
      return s;
    s.data.push_back(v);
  }
  s.ok = true;
  return s;
}

graph::Attribute strings_attr(std::vector<std::string> v) {
  graph::Attribute a;
  a.type = graph::Attribute::Type::kStrings;
  a.strings = std::move(v);
  return a;
}

class Fuser {
 public:
  Fuser(graph::Graph& g, const FuseElementwiseOptions& o, int64_t opset)
      : g_(g), o_(o), users_(value_users(g)), member_(g.nodes.size(), -1), dead_(g.nodes.size(), 0) {
    for (const auto& n : g.nodes) steps_.push_back(step_of(g, n, opset));
  }

  // Grows a group back from each node, last node first; returns the nodes
  // fused away.
  int run(std::vector<std::string>* summaries) {
    int removed = 0;
    for (int r = static_cast<int>(g_.nodes.size()) - 1; r >= 0; --r) {
      if (!steps_[r].ok || member_[r] >= 0) continue;
      std::vector<int> group = grow(r);
      if (group.size() < 2) continue;
      graph::Node fused = build(group, r);
      if (!accepted(fused)) {
        for (int m : group) member_[m] = -1;
        continue;
      }
      summaries->push_back(ew::chain_summary(ew::chain_program(fused)));
      for (int m : group) dead_[m] = m != r;
      g_.nodes[r] = std::move(fused);
      removed += static_cast<int>(group.size()) - 1;
    }
    if (removed) erase_nodes(g_, dead_);
    return removed;
  }

 private:
  bool in_group(int node, int root) const { return node >= 0 && member_[node] == root; }

  // The group's outside operands, in the order its nodes read them.
  std::vector<int> outside_operands(const std::vector<int>& group, int root) const {
    std::vector<int> ext;
    for (int m : group)
      for (int v : steps_[m].data)
        if (!in_group(g_.values[v].producer, root) && std::find(ext.begin(), ext.end(), v) == ext.end())
          ext.push_back(v);
    return ext;
  }

  std::vector<int> grow(int root) {
    std::vector<int> group{root};
    member_[root] = root;
    for (bool grew = true; grew;) {
      grew = false;
      for (size_t i = 0; i < group.size(); ++i)
        for (int v : steps_[group[i]].data) {
          const int p = g_.values[v].producer;
          if (p < 0 || !steps_[p].ok || member_[p] >= 0 || is_graph_output(g_, v)) continue;
          bool all_inside = true;
          for (int u : users_[v]) all_inside = all_inside && in_group(u, root);
          if (!all_inside || static_cast<int>(group.size()) >= ew::kChainMaxSteps) continue;
          member_[p] = root;
          group.push_back(p);
          if (static_cast<int>(outside_operands(group, root).size()) > ew::kChainMaxInputs) {
            member_[p] = -1;
            group.pop_back();
            continue;
          }
          grew = true;
        }
    }
    std::sort(group.begin(), group.end());  // the graph's (topological) order
    if (group.size() < 2) member_[root] = -1;
    return group;
  }

  graph::Node build(const std::vector<int>& group, int root) const {
    const std::vector<int> ext = outside_operands(group, root);
    std::vector<int> reg(g_.values.size(), -1);
    for (size_t k = 0; k < ext.size(); ++k) reg[ext[k]] = static_cast<int>(k);
    std::vector<std::string> ops;
    std::vector<int64_t> args;
    std::vector<float> params;
    for (size_t k = 0; k < group.size(); ++k) {
      const StepOf& s = steps_[group[k]];
      ops.push_back(ew::chain_op_name(s.op));
      args.push_back(reg[s.data[0]]);
      args.push_back(s.data.size() > 1 ? reg[s.data[1]] : -1);
      params.push_back(s.p0);
      params.push_back(s.p1);
      reg[g_.nodes[group[k]].outputs[0]] = static_cast<int>(ext.size() + k);
    }
    graph::Node n;
    const graph::Node& last = g_.nodes[root];
    n.name = (last.name.empty() ? g_.values[last.outputs[0]].name : last.name) + "::fused";
    n.op_type = ew::kFusedElementwiseOp;
    n.domain = kTwinferDomain;
    n.inputs = ext;
    n.outputs = {g_.nodes[root].outputs[0]};
    n.attrs["ops"] = strings_attr(std::move(ops));
    n.attrs["args"] = ints_attr(std::move(args));
    n.attrs["params"] = floats_attr(std::move(params));
    return n;
  }

  // Asks the kernels about a one-node graph holding `n`.
  bool accepted(const graph::Node& n) const { return one_node_accepted(g_, n, o_.supports); }

  graph::Graph& g_;
  const FuseElementwiseOptions& o_;
  std::vector<std::vector<int>> users_;
  std::vector<StepOf> steps_;
  std::vector<int> member_;  // per node: the root of the group it is in, -1 when none
  std::vector<char> dead_;
};

}  // namespace

int fuse_elementwise(graph::Graph& g, const FuseElementwiseOptions& o, const PassContext& ctx) {
  g.topo_sort();
  std::vector<std::string> summaries;
  const int removed = Fuser(g, o, ctx.opset).run(&summaries);
  if (!removed) return 0;
  g.remove_dead();  // Clip's bounds, now params, are constants nothing reads
  std::string line = "fuse elementwise: " + std::to_string(summaries.size()) + " chains of " +
                     std::to_string(removed + static_cast<int>(summaries.size())) + " ops";
  for (size_t i = 0; i < summaries.size() && i < 3; ++i) line += (i ? "; " : " (") + summaries[i];
  line += summaries.size() > 3 ? "; ...)" : ")";
  ctx.note(line);
  return removed;
}

}  // namespace twinfer::passes
