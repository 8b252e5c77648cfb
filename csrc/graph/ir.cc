#include "graph/ir.h"

#include <algorithm>
#include <atomic>
#include <functional>

namespace twinfer::graph {

const Attribute* Node::attr(const std::string& n) const {
  auto it = attrs.find(n);
  return it == attrs.end() ? nullptr : &it->second;
}

const Attribute& Node::required_attr(const std::string& n) const {
  const Attribute* a = attr(n);
  if (!a) throw Error(ErrorKind::kModelFormat, "missing required attribute '" + n + "'", name, op_type);
  return *a;
}

int64_t Node::attr_int(const std::string& n, int64_t dflt) const {
  const Attribute* a = attr(n);
  if (!a) return dflt;
  if (a->type != Attribute::Type::kInt)
    throw Error(ErrorKind::kModelFormat, "attribute '" + n + "' must be an int", name, op_type);
  return a->i;
}

float Node::attr_float(const std::string& n, float dflt) const {
  const Attribute* a = attr(n);
  if (!a) return dflt;
  if (a->type == Attribute::Type::kInt) return static_cast<float>(a->i);
  if (a->type != Attribute::Type::kFloat)
    throw Error(ErrorKind::kModelFormat, "attribute '" + n + "' must be a float", name, op_type);
  return a->f;
}

std::string Node::attr_string(const std::string& n, const std::string& dflt) const {
  const Attribute* a = attr(n);
  if (!a) return dflt;
  if (a->type != Attribute::Type::kString)
    throw Error(ErrorKind::kModelFormat, "attribute '" + n + "' must be a string", name, op_type);
  return a->s;
}

std::vector<int64_t> Node::attr_ints(const std::string& n, std::vector<int64_t> dflt) const {
  const Attribute* a = attr(n);
  if (!a) return dflt;
  if (a->type == Attribute::Type::kInt) return {a->i};
  if (a->type != Attribute::Type::kInts)
    throw Error(ErrorKind::kModelFormat, "attribute '" + n + "' must be a list of ints", name, op_type);
  return a->ints;
}

std::vector<float> Node::attr_floats(const std::string& n, std::vector<float> dflt) const {
  const Attribute* a = attr(n);
  if (!a) return dflt;
  if (a->type == Attribute::Type::kFloat) return {a->f};
  if (a->type != Attribute::Type::kFloats)
    throw Error(ErrorKind::kModelFormat, "attribute '" + n + "' must be a list of floats", name, op_type);
  return a->floats;
}

std::unordered_map<std::string, int>& Graph::own_value_ids() {
  if (!value_ids_) {
    value_ids_ = std::make_shared<std::unordered_map<std::string, int>>();
    value_ids_->reserve(values.size());
    for (size_t v = 0; v < values.size(); ++v)
      if (!values[v].name.empty()) value_ids_->emplace(values[v].name, static_cast<int>(v));
  } else if (value_ids_.use_count() > 1) {
    value_ids_ = std::make_shared<std::unordered_map<std::string, int>>(*value_ids_);
  } else {
    // The last holder: copies on other threads that read the index and let
    // go of it did so before this write (use_count is a relaxed load).
    std::atomic_thread_fence(std::memory_order_acquire);
  }
  return *value_ids_;
}

int Graph::value_id(const std::string& name) {
  auto& ids = own_value_ids();
  auto it = ids.find(name);
  if (it != ids.end()) return it->second;
  int id = static_cast<int>(values.size());
  values.push_back(Value{});
  values.back().name = name;
  ids.emplace(name, id);
  return id;
}

int Graph::find_value(const std::string& name) const {
  if (value_ids_) {
    auto it = value_ids_->find(name);
    return it == value_ids_->end() ? -1 : it->second;
  }
  if (name.empty()) return -1;  // as in the index (an omitted input is not a value)
  for (size_t v = 0; v < values.size(); ++v)
    if (values[v].name == name) return static_cast<int>(v);
  return -1;
}

void Graph::index_value(int id) { own_value_ids()[values[id].name] = id; }

int Graph::add_node(Node n) {
  int idx = static_cast<int>(nodes.size());
  for (int o : n.outputs)
    if (o >= 0) values[o].producer = idx;
  nodes.push_back(std::move(n));
  return idx;
}

void Graph::topo_sort() {
  const int n = static_cast<int>(nodes.size());
  for (auto& v : values) v.producer = -1;
  for (int i = 0; i < n; ++i)
    for (int o : nodes[i].outputs) {
      if (o < 0) continue;
      if (values[o].producer >= 0)
        throw Error(ErrorKind::kModelFormat, "value '" + values[o].name + "' is produced twice",
                    nodes[i].name, nodes[i].op_type);
      if (values[o].is_constant())
        throw Error(ErrorKind::kModelFormat,
                    "value '" + values[o].name + "' is both an initializer and a node output",
                    nodes[i].name, nodes[i].op_type);
      values[o].producer = i;
    }
  // Already in order (most calls: a pass that erased nodes or added them
  // after their producers): Kahn's algorithm below would keep it as it is.
  bool in_order = true;
  for (int i = 0; i < n && in_order; ++i)
    for (int in : nodes[i].inputs)
      if (in >= 0 && values[in].producer >= i) {
        in_order = false;
        break;
      }
  if (in_order) return;
  // Kahn's algorithm, keeping the original order among ready nodes.
  std::vector<int> pending(n, 0);
  std::vector<std::vector<int>> users(n);
  for (int i = 0; i < n; ++i)
    for (int in : nodes[i].inputs)
      if (in >= 0 && values[in].producer >= 0) {
        ++pending[i];
        users[values[in].producer].push_back(i);
      }
  std::vector<int> order, ready;
  for (int i = n - 1; i >= 0; --i)
    if (!pending[i]) ready.push_back(i);
  while (!ready.empty()) {
    int i = ready.back();
    ready.pop_back();
    order.push_back(i);
    std::vector<int> newly;
    for (int u : users[i])
      if (--pending[u] == 0) newly.push_back(u);
    std::sort(newly.rbegin(), newly.rend());
    ready.insert(ready.end(), newly.begin(), newly.end());
    std::sort(ready.rbegin(), ready.rend());
  }
  if (static_cast<int>(order.size()) != n) {
    for (int i = 0; i < n; ++i)
      if (pending[i])
        throw Error(ErrorKind::kModelFormat, "graph has a cycle or an input nothing produces",
                    nodes[i].name, nodes[i].op_type);
  }
  std::vector<Node> sorted;
  sorted.reserve(n);
  for (int i : order) sorted.push_back(std::move(nodes[i]));
  nodes = std::move(sorted);
  for (int i = 0; i < n; ++i)
    for (int o : nodes[i].outputs)
      if (o >= 0) values[o].producer = i;
}

void Graph::remove_dead() {
  std::vector<char> live_value(values.size(), 0);
  for (int o : outputs) live_value[o] = 1;
  std::vector<char> keep(nodes.size(), 0);
  for (int i = static_cast<int>(nodes.size()) - 1; i >= 0; --i) {
    bool needed = false;
    for (int o : nodes[i].outputs)
      if (o >= 0 && live_value[o]) needed = true;
    if (!needed) continue;
    keep[i] = 1;
    for (int in : nodes[i].inputs)
      if (in >= 0) live_value[in] = 1;
  }
  std::vector<Node> kept;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (keep[i]) kept.push_back(std::move(nodes[i]));
  nodes = std::move(kept);
  // Free constants nothing uses any more (values keep their ids).
  for (size_t v = 0; v < values.size(); ++v)
    if (!live_value[v] && values[v].is_constant()) values[v].constant = Tensor();
  for (auto& v : values) v.producer = -1;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (int o : nodes[i].outputs)
      if (o >= 0) values[o].producer = static_cast<int>(i);
}

void Graph::compact() {
  remove_dead();
  std::vector<int> remap(values.size(), -1);
  int next = 0;
  const auto keep = [&](int v) {
    if (v >= 0 && remap[v] < 0) remap[v] = next++;
  };
  for (int v : inputs) keep(v);
  for (const auto& n : nodes) {
    for (int v : n.inputs) keep(v);
    for (int v : n.outputs) keep(v);
  }
  for (int v : outputs) keep(v);
  if (next == static_cast<int>(values.size())) {
    bool same = true;
    for (size_t v = 0; v < remap.size() && same; ++v) same = remap[v] == static_cast<int>(v);
    if (same) return;
  }
  std::vector<Value> kept(next);
  for (size_t v = 0; v < values.size(); ++v)
    if (remap[v] >= 0) kept[remap[v]] = std::move(values[v]);
  values = std::move(kept);
  const auto renumber = [&](std::vector<int>& ids) {
    for (int& v : ids)
      if (v >= 0) v = remap[v];
  };
  renumber(inputs);
  renumber(outputs);
  for (auto& n : nodes) {
    renumber(n.inputs);
    renumber(n.outputs);
  }
  value_ids_.reset();
}

}  // namespace twinfer::graph
