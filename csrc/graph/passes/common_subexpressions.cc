#include "graph/passes/common_subexpressions.h"

#include <cstring>
#include <unordered_map>
#include <unordered_set>
#include <string>
#include <vector>

#include "graph/passes/rewrite_util.h"

namespace twinfer::passes {

namespace {

constexpr int64_t kSmallConstant = 64;  // elements: shapes, axes, scalars, small masks

bool plain_tensor(const Tensor& t) {
  return t.defined() && t.dtype() != DType::kString && !dtype_is_container(t.dtype()) && t.data();
}

std::string tensor_key(const Tensor& t) {
  std::string k = std::to_string(static_cast<int>(t.dtype())) + "[";
  for (int64_t d : t.shape()) k += std::to_string(d) + ",";
  k += "]";
  k.append(static_cast<const char*>(t.data()), t.bytes());
  return k;
}

// The attributes as one string; false when one cannot be compared (a
// subgraph, a tensor of strings).
bool attrs_key(const graph::Node& n, std::string* key) {
  for (const auto& [name, a] : n.attrs) {
    if (a.g || !a.graphs.empty() || !a.tensors.empty()) return false;
    *key += name + "=" + std::to_string(static_cast<int>(a.type)) + ":";
    switch (a.type) {
      case graph::Attribute::Type::kFloat: key->append(reinterpret_cast<const char*>(&a.f), sizeof a.f); break;
      case graph::Attribute::Type::kInt: *key += std::to_string(a.i); break;
      case graph::Attribute::Type::kString: *key += std::to_string(a.s.size()) + ":" + a.s; break;
      case graph::Attribute::Type::kFloats:
        key->append(reinterpret_cast<const char*>(a.floats.data()), a.floats.size() * sizeof(float));
        break;
      case graph::Attribute::Type::kInts:
        for (int64_t v : a.ints) *key += std::to_string(v) + ",";
        break;
      case graph::Attribute::Type::kStrings:
        for (const auto& s : a.strings) *key += std::to_string(s.size()) + ":" + s;
        break;
      case graph::Attribute::Type::kTensor:
        if (!plain_tensor(a.t)) return false;
        *key += tensor_key(a.t);
        break;
      default: return false;
    }
    *key += ";";
  }
  return true;
}

bool never_merged(const graph::Node& n) {
  static const std::unordered_set<std::string> kOps = {
      "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
      "Bernoulli",    "Dropout",       "Conv",             "ConvTranspose",     "MatMul",
      "Gemm",         "If",            "Loop",             "Scan"};
  return kOps.count(n.op_type) != 0;
}

// Repeated small constants: each later one maps to the first (`to`).
int merge_small_constants(const graph::Graph& g, std::vector<int>& to) {
  std::vector<char> protected_value(g.values.size(), 0);
  for (int v : g.inputs) protected_value[v] = 1;  // an overridable initializer
  for (int v : g.outputs) protected_value[v] = 1;
  std::unordered_map<std::string, int> first;
  int merged = 0;
  for (size_t v = 0; v < g.values.size(); ++v) {
    const graph::Value& val = g.values[v];
    if (!val.is_constant() || protected_value[v] || !plain_tensor(val.constant) ||
        val.constant.numel() > kSmallConstant)
      continue;
    const auto [it, fresh] = first.emplace(tensor_key(val.constant), static_cast<int>(v));
    if (fresh) continue;
    to[v] = it->second;
    ++merged;
  }
  return merged;
}

template <typename T>
void put(std::string* k, T v) {
  k->append(reinterpret_cast<const char*>(&v), sizeof v);
}

}  // namespace

int eliminate_common_subexpressions(graph::Graph& g, const PassContext& ctx) {
  // Merged values map to the value that stays (`to`, one level: what stays
  // is never merged itself), applied to every input once at the end: a
  // plan's graph meets this pass on every new shape.
  std::vector<int> to(g.values.size());
  for (size_t v = 0; v < to.size(); ++v) to[v] = static_cast<int>(v);
  const int constants = merge_small_constants(g, to);
  std::unordered_map<std::string, int> first;  // key -> node index
  std::vector<char> dead(g.nodes.size(), 0);
  int nodes = 0;
  std::string key;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const graph::Node& n = g.nodes[i];
    if (never_merged(n)) continue;
    bool writes_output = false;
    for (int o : n.outputs) writes_output = writes_output || (o >= 0 && is_graph_output(g, o));
    if (writes_output) continue;
    key = n.domain + "|" + n.op_type + "|";
    put(&key, n.outputs.size());
    put(&key, n.inputs.size());
    for (int in : n.inputs) put(&key, in >= 0 ? to[in] : in);
    if (!attrs_key(n, &key)) continue;
    const auto [it, fresh] = first.emplace(key, static_cast<int>(i));
    if (fresh) continue;
    const graph::Node& same = g.nodes[it->second];
    // An output this node writes and the earlier one leaves out: keep both.
    bool all_mapped = true;
    for (size_t k = 0; k < n.outputs.size(); ++k) all_mapped = all_mapped && !(n.outputs[k] >= 0 && same.outputs[k] < 0);
    if (!all_mapped) continue;
    for (size_t k = 0; k < n.outputs.size(); ++k)
      if (n.outputs[k] >= 0) to[n.outputs[k]] = same.outputs[k];
    dead[i] = 1;
    ++nodes;
  }
  if (nodes || constants)
    for (auto& n : g.nodes)
      for (int& in : n.inputs)
        if (in >= 0) in = to[in];
  if (nodes) erase_nodes(g, dead);
  if (nodes || constants)
    ctx.note("common_subexpressions: " + std::to_string(nodes) + " repeated nodes, " + std::to_string(constants) +
             " repeated constants merged");
  return nodes + constants;
}

}  // namespace twinfer::passes
