#include "runtime/host_head.h"

#include <algorithm>

#include "runtime/plan_split.h"

namespace twinfer {

std::unique_ptr<HostHead> split_host_head(const graph::Graph& g) {
  if (std::none_of(g.inputs.begin(), g.inputs.end(), [&](int v) { return is_host_object(g.values[v]); }))
    return nullptr;  // (before copying the graph: most engines ask once and have none)
  graph::Graph s = g;  // constants share storage
  s.topo_sort();
  const size_t n = s.nodes.size();
  // A node is in the head when it reads a host object that is an input (or
  // a constant) or that the head made.
  std::vector<char> in_head(n, 0), head_made(s.values.size(), 0);
  const auto producer_in_head = [&](int v) { return s.values[v].producer >= 0 && in_head[s.values[v].producer]; };
  for (size_t i = 0; i < n; ++i) {
    for (int v : s.nodes[i].inputs)
      if (v >= 0 && is_host_object(s.values[v]) && (s.values[v].producer < 0 || head_made[v])) in_head[i] = 1;
    if (!in_head[i]) continue;
    for (int v : s.nodes[i].inputs)  // the head runs first: it may read nothing the rest makes
      if (v >= 0 && s.values[v].producer >= 0 && !producer_in_head(v)) return nullptr;
    for (int o : s.nodes[i].outputs)
      if (o >= 0) head_made[o] = 1;
  }
  const size_t head_nodes = static_cast<size_t>(std::count(in_head.begin(), in_head.end(), 1));
  if (head_nodes == 0 || head_nodes == n) return nullptr;

  auto h = std::make_unique<HostHead>();
  // What the rest reads from the head (plain tensors: a node reading one of
  // the head's host objects is in the head), each once, in order.
  std::vector<int> boundary;
  std::vector<char> listed(s.values.size(), 0);
  for (size_t i = 0; i < n; ++i)
    if (!in_head[i])
      for (int v : s.nodes[i].inputs)
        if (v >= 0 && head_made[v] && !listed[v]) {
          listed[v] = 1;
          boundary.push_back(v);
        }
  std::vector<int> head_outputs = boundary, rest_outputs;
  for (int v : s.outputs) {
    if (head_made[v]) {
      if (!listed[v]) head_outputs.push_back(v);
    } else if (s.values[v].producer >= 0) {
      rest_outputs.push_back(v);
    }
  }
  if (rest_outputs.empty()) return nullptr;  // the rest makes nothing the caller sees
  // The engine inputs each part reads.
  std::vector<char> head_reads(s.values.size(), 0), rest_reads(s.values.size(), 0);
  for (size_t i = 0; i < n; ++i)
    for (int v : s.nodes[i].inputs)
      if (v >= 0) (in_head[i] ? head_reads : rest_reads)[v] = 1;

  h->head = s;
  h->rest = s;
  h->head.nodes.clear();
  h->rest.nodes.clear();
  for (size_t i = 0; i < n; ++i) (in_head[i] ? h->head : h->rest).nodes.push_back(s.nodes[i]);
  h->head.inputs.clear();
  h->rest.inputs.clear();
  for (size_t k = 0; k < s.inputs.size(); ++k) {
    const int v = s.inputs[k];
    if (head_reads[v]) {
      h->head.inputs.push_back(v);
      h->head_engine_inputs.push_back(static_cast<int>(k));
    }
    if (rest_reads[v]) h->rest.inputs.push_back(v);
  }
  h->rest.inputs.insert(h->rest.inputs.end(), boundary.begin(), boundary.end());
  h->head.outputs = head_outputs;
  h->rest.outputs = rest_outputs;
  for (graph::Graph* part : {&h->head, &h->rest}) {
    part->topo_sort();  // producer links for the nodes each part kept
    part->compact();
  }
  return h;
}

}  // namespace twinfer
