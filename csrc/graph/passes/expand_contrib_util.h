// What the contrib-op rewrites share (expand_contrib*.cc): reading a node's
// optional inputs and outputs, and building its replacement nodes.
#pragma once
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "graph/ir.h"
#include "graph/passes/rewrite_util.h"

namespace twinfer::passes::contrib {

// The rewrites' files say `using namespace contrib;` for these and the helpers below.
using graph::Attribute;
using graph::Graph;
using graph::Node;

inline constexpr const char* kDomain = "com.microsoft";

inline bool is_contrib(const graph::Node& n, const char* op) { return n.domain == kDomain && n.op_type == op; }

// Throws kUnsupportedOp "com.microsoft::<op> with <what> is not supported"
// when `bad`: a form of the op a rewrite does not cover, named.
inline void refuse_if(bool bad, const graph::Node& n, const std::string& what) {
  if (bad)
    throw Error(ErrorKind::kUnsupportedOp, "com.microsoft::" + n.op_type + " with " + what + " is not supported",
                n.name, n.op_type);
}

// Input/output value i, or -1 when the node leaves it out.
inline int input(const graph::Node& n, size_t i) { return i < n.inputs.size() ? n.inputs[i] : -1; }
inline int output(const graph::Node& n, size_t i) { return i < n.outputs.size() ? n.outputs[i] : -1; }

// Values `ids` as the rewrite of a node sees them: declared, constant, or
// else as shape inference and folding over the nodes `built` so far give
// them (every node upstream, contrib ops already rewritten), on a copy of the
// graph. A mask's rank is often computed from the input's shape in many small
// steps, and a constant must take its operand's type. Control flow is left
// out of the copy (its rules would type the bodies' values, which the graph
// shares); what stays unknown has no shape (rank) or kUndefined (type).
std::vector<graph::Value> upstream_values(const Graph& g, const std::vector<Node>& built, int64_t opset,
                                          const std::vector<int>& ids);

// While one lives, the rewrites of a body of `g` (an If branch, a Loop body)
// see the values it reads from `g` as `g` types them (upstream_values).
class EnclosingGraph {
 public:
  explicit EnclosingGraph(const Graph& g);
  ~EnclosingGraph();
  EnclosingGraph(const EnclosingGraph&) = delete;
  EnclosingGraph& operator=(const EnclosingGraph&) = delete;
};

// Collects the replacement nodes of one contrib node, naming new values
// after it; `out` receives them in order.
struct Builder {
  graph::Graph& g;
  const graph::Node& from;
  std::vector<graph::Node>& out;
  // The model's ai.onnx opset, for the ops whose form it decides (the
  // helpers below); 0 when a rule builds none of them.
  int64_t opset = 0;
  int step = 0;

  Builder(graph::Graph& graph, const graph::Node& node, std::vector<graph::Node>& nodes, int64_t model_opset = 0)
      : g(graph), from(node), out(nodes), opset(model_opset) {}

  std::string prefix() const { return from.name.empty() ? from.op_type : from.name; }
  int value(const std::string& what) { return add_value(g, prefix() + "/" + what); }
  int constant(const std::string& what, Tensor t) { return add_constant(g, prefix() + "/" + what, std::move(t)); }
  int node(const std::string& op, std::vector<int> inputs, std::vector<int> outputs,
           std::map<std::string, graph::Attribute> attrs = {}) {
    graph::Node n;
    n.name = prefix() + "/" + op + "_" + std::to_string(step++);
    n.op_type = op;
    n.inputs = std::move(inputs);
    n.outputs = std::move(outputs);
    n.attrs = std::move(attrs);
    out.push_back(std::move(n));
    return out.back().outputs.empty() ? -1 : out.back().outputs[0];
  }
  // x + bias when bias is given, else x.
  int plus(int x, int bias, const std::string& what) {
    if (bias < 0) return x;
    return node("Add", {x, bias}, {value(what)});
  }

  // Constants: a 1-D int64 tensor, an int64 or float32 scalar.
  int ints(const std::string& what, const std::vector<int64_t>& v) {
    Tensor t = Tensor::empty(DType::kInt64, {static_cast<int64_t>(v.size())});
    if (!v.empty()) std::memcpy(t.data(), v.data(), v.size() * sizeof(int64_t));
    return constant(what, std::move(t));
  }
  int scalar_int(const std::string& what, int64_t v) {
    Tensor t = Tensor::empty(DType::kInt64, {});
    *t.data_as<int64_t>() = v;
    return constant(what, std::move(t));
  }
  int scalar_float(const std::string& what, float v) {
    Tensor t = Tensor::empty(DType::kFloat32, {});
    *t.data_as<float>() = v;
    return constant(what, std::move(t));
  }
  // A scalar of float type `type` (float32 when it is not a float type or not known).
  int scalar_of(const std::string& what, float v, DType type) {
    if (type == DType::kFloat64) {
      Tensor t = Tensor::empty(type, {});
      *t.data_as<double>() = v;
      return constant(what, std::move(t));
    }
    if (type != DType::kFloat16 && type != DType::kBFloat16) return scalar_float(what, v);
    Tensor t = Tensor::empty(type, {});
    *static_cast<uint16_t*>(t.data()) = type == DType::kFloat16 ? float_to_half(v) : float_to_bf16(v);
    return constant(what, std::move(t));
  }

  // The ops whose axes / sizes / bounds moved from attributes to inputs,
  // written in the model's opset's form.
  int unsqueeze(int x, const std::vector<int64_t>& axes, const std::string& what) {
    if (needs_opset(13)) return node("Unsqueeze", {x, ints(what + "_axes", axes)}, {value(what)});
    return node("Unsqueeze", {x}, {value(what)}, {{"axes", ints_attr(axes)}});
  }
  // ReduceSum / ReduceMax / ...: axes an input from opset 13 (ReduceSum) or 18 (the others).
  int reduce(const std::string& op, int x, const std::vector<int64_t>& axes, bool keepdims, const std::string& what) {
    std::map<std::string, graph::Attribute> attrs{{"keepdims", int_attr(keepdims ? 1 : 0)}};
    if (needs_opset(op == "ReduceSum" ? 13 : 18)) return node(op, {x, ints(what + "_axes", axes)}, {value(what)}, attrs);
    attrs["axes"] = ints_attr(axes);
    return node(op, {x}, {value(what)}, attrs);
  }
  // Split along `axis` into outs.size() parts: `sizes`, or equal parts when empty.
  void split(int x, int64_t axis, const std::vector<int64_t>& sizes, const std::vector<int>& outs) {
    std::map<std::string, graph::Attribute> attrs{{"axis", int_attr(axis)}};
    std::vector<int> ins{x};
    if (!sizes.empty() && needs_opset(13)) ins.push_back(ints("split", sizes));
    else if (!sizes.empty()) attrs["split"] = ints_attr(sizes);
    else if (needs_opset(18)) attrs["num_outputs"] = int_attr(static_cast<int64_t>(outs.size()));
    node("Split", ins, outs, attrs);
  }
  // Dim `axis` of x's shape, as an int64 scalar.
  int dim(int x, int64_t axis, const std::string& what) {
    const int shape = node("Shape", {x}, {value(what + "_shape")});
    return node("Gather", {shape, scalar_int(what + "_axis", axis)}, {value(what)});
  }

 private:
  bool needs_opset(int64_t since) const {
    if (opset <= 0) throw Error(ErrorKind::kRuntime, "contrib rewrite of " + prefix() + " built an op without the opset");
    return opset >= since;
  }
};

}  // namespace twinfer::passes::contrib
