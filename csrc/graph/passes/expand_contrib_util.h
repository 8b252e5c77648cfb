// What the contrib-op rewrites share (expand_contrib*.cc): reading a node's
// optional inputs and outputs, and building its replacement nodes.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "graph/passes/rewrite_util.h"

namespace twinfer::passes::contrib {

inline constexpr const char* kDomain = "com.microsoft";

inline bool is_contrib(const graph::Node& n, const char* op) { return n.domain == kDomain && n.op_type == op; }

// Input/output value i, or -1 when the node leaves it out.
inline int input(const graph::Node& n, size_t i) { return i < n.inputs.size() ? n.inputs[i] : -1; }
inline int output(const graph::Node& n, size_t i) { return i < n.outputs.size() ? n.outputs[i] : -1; }

// Collects the replacement nodes of one contrib node, naming new values
// after it; `out` receives them in order.
struct Builder {
  graph::Graph& g;
  const graph::Node& from;
  std::vector<graph::Node>& out;
  int step = 0;

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
};

}  // namespace twinfer::passes::contrib
