#include "graph/passes/rewrite_util.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace twinfer::passes {

std::vector<std::vector<int>> value_users(const graph::Graph& g) {
  std::vector<std::vector<int>> users(g.values.size());
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int in : g.nodes[i].inputs)
      if (in >= 0) users[in].push_back(static_cast<int>(i));
  return users;
}

bool is_graph_output(const graph::Graph& g, int value) {
  return std::find(g.outputs.begin(), g.outputs.end(), value) != g.outputs.end();
}

void replace_uses(graph::Graph& g, int from, int to) {
  for (auto& n : g.nodes)
    for (int& in : n.inputs)
      if (in == from) in = to;
}

void erase_nodes(graph::Graph& g, const std::vector<char>& dead) {
  std::vector<graph::Node> kept;
  kept.reserve(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!dead[i]) kept.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(kept);
  for (auto& v : g.values) v.producer = -1;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int o : g.nodes[i].outputs)
      if (o >= 0) g.values[o].producer = static_cast<int>(i);
}

void replace_fused_nodes(graph::Graph& g, const std::vector<char>& dead, std::vector<graph::Node>& added) {
  erase_nodes(g, dead);
  for (auto& n : added) g.add_node(std::move(n));
  g.topo_sort();
  g.remove_dead();
}

int rewrite_each_node(graph::Graph& g, const std::function<bool(size_t, std::vector<graph::Node>&)>& rewrite) {
  std::vector<char> dead(g.nodes.size(), 0);
  std::vector<graph::Node> added;
  int count = 0;
  for (size_t i = 0; i < dead.size(); ++i) {
    const size_t mark = added.size();
    if (rewrite(i, added)) {
      dead[i] = 1;
      ++count;
    } else {
      added.resize(mark);
    }
  }
  if (count) replace_fused_nodes(g, dead, added);
  return count;
}

int add_value(graph::Graph& g, const std::string& name) {
  std::string unique = name;
  for (int k = 1; g.find_value(unique) >= 0; ++k) unique = name + "_" + std::to_string(k);
  return g.value_id(unique);
}

int add_constant(graph::Graph& g, const std::string& name, Tensor t) {
  const int id = add_value(g, name);
  auto& v = g.values[id];
  v.dtype = t.dtype();
  v.has_shape = true;
  v.shape = sym_shape_from(t.shape());
  v.constant = std::move(t);
  return id;
}

graph::Attribute int_attr(int64_t i) {
  graph::Attribute a;
  a.type = graph::Attribute::Type::kInt;
  a.i = i;
  return a;
}

graph::Attribute ints_attr(std::vector<int64_t> v) {
  graph::Attribute a;
  a.type = graph::Attribute::Type::kInts;
  a.ints = std::move(v);
  return a;
}

graph::Attribute string_attr(const std::string& s) {
  graph::Attribute a;
  a.type = graph::Attribute::Type::kString;
  a.s = s;
  return a;
}

graph::Attribute float_attr(float f) {
  graph::Attribute a;
  a.type = graph::Attribute::Type::kFloat;
  a.f = f;
  return a;
}

graph::Attribute floats_attr(std::vector<float> f) {
  graph::Attribute a;
  a.type = graph::Attribute::Type::kFloats;
  a.floats = std::move(f);
  return a;
}

bool scalar_constant(const graph::Graph& g, int v, double* out) {
  if (v < 0 || !g.values[v].is_constant()) return false;
  const Tensor& t = g.values[v].constant;
  if (t.numel() != 1) return false;
  if (t.dtype() == DType::kFloat32) *out = *t.data_as<float>();
  else if (t.dtype() == DType::kFloat64) *out = *t.data_as<double>();
  else return false;
  return true;
}

bool one_node_accepted(const graph::Graph& g, const graph::Node& n,
                       const NodeSupport& supports, const std::function<void(graph::Value&)>& as) {
  graph::Graph mini;
  graph::Node copy = n;
  auto add = [&](int v) {
    if (v < 0) return v;
    graph::Value val = g.values[v];
    val.producer = -1;
    if (as) as(val);
    mini.values.push_back(std::move(val));
    return static_cast<int>(mini.values.size()) - 1;
  };
  for (int& v : copy.inputs) v = add(v);
  for (int& v : copy.outputs) {
    v = add(v);
    if (v >= 0) mini.values[v].producer = 0;
  }
  mini.nodes.push_back(copy);
  try {
    return supports(mini, mini.nodes.back());
  } catch (const Error&) {
    return false;
  }
}

graph::Node cast_node(const std::string& name, int in, int out, DType to) {
  graph::Node c;
  c.name = name;
  c.op_type = "Cast";
  c.inputs = {in};
  c.outputs = {out};
  c.attrs["to"] = int_attr(dtype_to_onnx(to));
  return c;
}

graph::Node transpose_node(const std::string& name, int from, int to, const std::vector<int64_t>& perm) {
  graph::Node t;
  t.name = name;
  t.op_type = "Transpose";
  t.inputs = {from};
  t.outputs = {to};
  t.attrs["perm"] = ints_attr(perm);
  return t;
}

int shaped_value(graph::Graph& g, const std::string& name, DType dt, const Shape& s) {
  const int v = add_value(g, name);
  g.values[v].dtype = dt;
  g.values[v].has_shape = true;
  g.values[v].shape = sym_shape_from(s);
  return v;
}

graph::Node reshape_node(graph::Graph& g, const std::string& name, int in, int out, const Shape& to) {
  Tensor shape = Tensor::empty(DType::kInt64, {static_cast<int64_t>(to.size())});
  for (size_t d = 0; d < to.size(); ++d) shape.data_as<int64_t>()[d] = to[d];
  graph::Node r;
  r.name = name;
  r.op_type = "Reshape";
  r.inputs = {in, add_constant(g, name + "/shape", std::move(shape))};
  r.outputs = {out};
  return r;
}

bool concrete_shape(const graph::Graph& g, int v, Shape* s) {
  if (v < 0 || !g.values[v].has_shape || !sym_shape_known(g.values[v].shape)) return false;
  *s = sym_shape_values(g.values[v].shape);
  return true;
}

bool is_default_op(const graph::Node& n, const char* op) { return n.domain.empty() && n.op_type == op; }

int other_input_if_const(const graph::Graph& g, const graph::Node& n, double c, double rel_tol) {
  double v;
  if (n.inputs.size() != 2) return -1;
  if (scalar_constant(g, n.inputs[1], &v) && std::fabs(v - c) <= rel_tol * std::fabs(c)) return n.inputs[0];
  if (scalar_constant(g, n.inputs[0], &v) && std::fabs(v - c) <= rel_tol * std::fabs(c)) return n.inputs[1];
  return -1;
}

}  // namespace twinfer::passes
