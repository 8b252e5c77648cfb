// Small helpers the rewrite passes share: who uses a value, replacing uses.
#pragma once
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {

// For each value id, the indices of nodes that read it (a node reading a value
// twice is listed twice).
std::vector<std::vector<int>> value_users(const graph::Graph& g);

bool is_graph_output(const graph::Graph& g, int value);

// Make every node that reads `from` read `to` instead.
void replace_uses(graph::Graph& g, int from, int to);

// Erase the nodes whose flag is set, keeping order.
void erase_nodes(graph::Graph& g, const std::vector<char>& dead);

// A fusion's last step: erase the `dead` nodes, add the fused ones in their
// place, sort and drop what no longer feeds an output.
void replace_fused_nodes(graph::Graph& g, const std::vector<char>& dead, std::vector<graph::Node>& added);

// Offers each node (by index) to `rewrite`, which appends its replacement to
// `added` and returns true, or returns false (what it appended is dropped);
// the rewritten nodes then give way to their replacements
// (replace_fused_nodes). Returns how many were rewritten.
int rewrite_each_node(graph::Graph& g, const std::function<bool(size_t, std::vector<graph::Node>&)>& rewrite);

// A new value named `name` (suffixed _1, _2... when taken); with a tensor,
// a constant holding it.
int add_value(graph::Graph& g, const std::string& name);
int add_constant(graph::Graph& g, const std::string& name, Tensor t);

// Attributes of each type, for the nodes a pass builds.
graph::Attribute int_attr(int64_t i);
graph::Attribute ints_attr(std::vector<int64_t> v);
graph::Attribute string_attr(const std::string& s);
graph::Attribute float_attr(float f);
graph::Attribute floats_attr(std::vector<float> f);

// Whether value v has a shape with every dim known (then *s holds it).
bool concrete_shape(const graph::Graph& g, int v, Shape* s);

// A Cast node from value `in` to value `out`, of type `to`.
graph::Node cast_node(const std::string& name, int in, int out, DType to);

// A Transpose node from value `from` to value `to`.
graph::Node transpose_node(const std::string& name, int from, int to, const std::vector<int64_t>& perm);

// A new value of type `dt` and concrete shape `s` (a plan pass's intermediate).
int shaped_value(graph::Graph& g, const std::string& name, DType dt, const Shape& s);

// A Reshape node from value `in` to value `out`, its shape `to` a constant
// named `name`/shape.
graph::Node reshape_node(graph::Graph& g, const std::string& name, int in, int out, const Shape& to);

// Groups of connected nodes (the layout passes' regions).
struct UnionFind {
  std::vector<int> parent;
  explicit UnionFind(size_t n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  int find(int i) { return parent[i] == i ? i : parent[i] = find(parent[i]); }
  void join(int a, int b) { parent[find(a)] = find(b); }
};

// Whether `supports` accepts `n` (not in g; its inputs and outputs are g's
// values) in a graph of its own: a one-node copy with those values. The plan
// passes ask the device's and the CPU's kernels this way; a throw is a no.
// `as` (optional) changes each copied value first (a pass asking about the
// node in other types: widen_precision's float32 form).
bool one_node_accepted(const graph::Graph& g, const graph::Node& n,
                       const NodeSupport& supports,
                       const std::function<void(graph::Value&)>& as = nullptr);

// The value of `v` when it is a one-element float32 / float64 constant.
bool scalar_constant(const graph::Graph& g, int v, double* out);

// Whether n is the default domain's `op`.
bool is_default_op(const graph::Node& n, const char* op);

// For a binary node, the input that is not a scalar constant within
// `rel_tol` of `c` (relative); -1 if neither is.
int other_input_if_const(const graph::Graph& g, const graph::Node& n, double c, double rel_tol);

}  // namespace twinfer::passes
