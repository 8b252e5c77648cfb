#include "runtime/plan_split.h"

#include <algorithm>

#include "core/tensor.h"

namespace twinfer {

namespace {

bool shape_known(const graph::Value& v) { return v.has_shape && sym_shape_known(v.shape) && !is_host_object(v); }

// g split where `starts_tail` says a node's output value can only be made
// by the host evaluator: that node, and every node reading what the tail
// makes, go to the tail; so do nodes reading a host object no node makes (a
// string constant). Everything before, along each path, is the prefix.
template <typename StartsTail>
bool split_where(const graph::Graph& g, StartsTail starts_tail, GraphSplit* out) {
  graph::Graph s = g;  // constants share storage
  s.topo_sort();       // producers first, and producer links to trust below
  const size_t n = s.nodes.size();
  std::vector<char> in_tail(n, 0), from_tail(s.values.size(), 0);
  for (size_t v = 0; v < s.values.size(); ++v)
    if (s.values[v].producer < 0 && is_host_object(s.values[v])) from_tail[v] = 1;
  for (size_t i = 0; i < n; ++i) {
    const graph::Node& node = s.nodes[i];
    bool tail = std::any_of(node.inputs.begin(), node.inputs.end(), [&](int v) { return v >= 0 && from_tail[v]; });
    for (int o : node.outputs) tail = tail || (o >= 0 && starts_tail(s.values[o]));
    if (!tail) continue;
    in_tail[i] = 1;
    for (int o : node.outputs)
      if (o >= 0) from_tail[o] = 1;
  }
  const int tail_nodes = static_cast<int>(std::count(in_tail.begin(), in_tail.end(), 1));
  if (tail_nodes == 0 || tail_nodes == static_cast<int>(n)) return false;

  // The prefix's outputs: what it makes that the tail reads or the graph
  // returns, each once, in the order they are first needed.
  std::vector<int> boundary;
  std::vector<char> listed(s.values.size(), 0);
  const auto made_before = [&](int v) {
    return v >= 0 && s.values[v].producer >= 0 && !in_tail[static_cast<size_t>(s.values[v].producer)];
  };
  const auto need = [&](int v) {
    if (made_before(v) && !listed[v]) {
      listed[v] = 1;
      boundary.push_back(v);
    }
  };
  for (size_t i = 0; i < n; ++i)
    if (in_tail[i])
      for (int v : s.nodes[i].inputs) need(v);
  for (int v : s.outputs) need(v);
  if (boundary.empty()) return false;  // the prefix feeds nothing that is used

  // The engine inputs the tail reads (or returns as they are).
  std::vector<char> tail_reads(s.values.size(), 0);
  for (size_t i = 0; i < n; ++i)
    if (in_tail[i])
      for (int v : s.nodes[i].inputs)
        if (v >= 0) tail_reads[v] = 1;
  for (int v : s.outputs) tail_reads[v] = 1;

  GraphSplit& r = *out;
  r.prefix = s;
  r.tail = s;
  r.prefix.nodes.clear();
  r.tail.nodes.clear();
  for (size_t i = 0; i < n; ++i) (in_tail[i] ? r.tail : r.prefix).nodes.push_back(s.nodes[i]);
  r.prefix.outputs = boundary;
  r.tail_engine_inputs.clear();
  r.tail.inputs.clear();
  for (size_t i = 0; i < s.inputs.size(); ++i)
    if (tail_reads[s.inputs[i]]) {
      r.tail_engine_inputs.push_back(static_cast<int>(i));
      r.tail.inputs.push_back(s.inputs[i]);
    }
  r.tail.inputs.insert(r.tail.inputs.end(), boundary.begin(), boundary.end());
  for (graph::Graph* part : {&r.prefix, &r.tail}) {
    part->topo_sort();  // producer links for the nodes each part kept
    part->compact();
  }
  return true;
}

}  // namespace

bool split_at_value_dependence(const graph::Graph& g, GraphSplit* out) {
  // Everything after the first value-dependent shape along each path.
  return split_where(g, [](const graph::Value& v) { return !shape_known(v); }, out);
}

bool split_at_host_objects(const graph::Graph& g, GraphSplit* out) {
  for (int v : g.inputs)
    if (is_host_object(g.values[static_cast<size_t>(v)])) return false;
  return split_where(g, is_host_object, out);
}

}  // namespace twinfer
