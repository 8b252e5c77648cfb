#include "graph/subgraph.h"

#include <algorithm>
#include <unordered_set>

namespace twinfer::graph {

std::vector<std::string> free_names(const Graph& sub) {
  std::vector<std::string> out;
  std::unordered_set<int> seen;
  for (const auto& n : sub.nodes)
    for (int in : n.inputs) {
      if (in < 0 || seen.count(in)) continue;
      const Value& v = sub.values[in];
      const bool is_input = std::find(sub.inputs.begin(), sub.inputs.end(), in) != sub.inputs.end();
      if (v.producer < 0 && !v.is_constant() && !is_input) {
        seen.insert(in);
        out.push_back(v.name);
      }
    }
  // A subgraph output may be an outer value passed straight through.
  for (int o : sub.outputs) {
    const Value& v = sub.values[o];
    const bool is_input = std::find(sub.inputs.begin(), sub.inputs.end(), o) != sub.inputs.end();
    if (v.producer < 0 && !v.is_constant() && !is_input && !seen.count(o)) {
      seen.insert(o);
      out.push_back(v.name);
    }
  }
  return out;
}

size_t explicit_input_count(const Node& n) {
  const Attribute* a = n.attr(kImplicitAttr);
  return a ? n.inputs.size() - a->strings.size() : n.inputs.size();
}

std::unordered_map<std::string, int> captured_inputs(const Node& n) {
  std::unordered_map<std::string, int> r;
  if (const Attribute* a = n.attr(kImplicitAttr)) {
    const size_t first = explicit_input_count(n);
    for (size_t k = 0; k < a->strings.size(); ++k) r[a->strings[k]] = n.inputs[first + k];
  }
  return r;
}

void capture_implicit_inputs(Graph& g, bool top_level) {
  bool changed = false;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    std::vector<std::string> names;
    std::unordered_set<std::string> have;
    for (auto& kv : g.nodes[i].attrs) {
      std::vector<Graph*> subs;
      if (kv.second.g) subs.push_back(kv.second.g.get());
      for (auto& sg : kv.second.graphs) subs.push_back(sg.get());
      for (Graph* sub : subs) {
        capture_implicit_inputs(*sub, false);
        for (auto& name : free_names(*sub))
          if (have.insert(name).second) names.push_back(name);
      }
    }
    if (names.empty() || g.nodes[i].has_attr(kImplicitAttr)) continue;
    for (const auto& name : names) {
      int id = g.find_value(name);
      if (id < 0) {
        if (top_level)
          throw Error(ErrorKind::kModelFormat, "a subgraph reads '" + name + "', which no enclosing graph defines",
                      g.nodes[i].name, g.nodes[i].op_type);
        id = g.value_id(name);  // a free variable of this subgraph too
      }
      g.nodes[i].inputs.push_back(id);
    }
    Attribute a;
    a.type = Attribute::Type::kStrings;
    a.strings = names;
    g.nodes[i].attrs[kImplicitAttr] = std::move(a);
    changed = true;
  }
  if (changed) g.topo_sort();
}

}  // namespace twinfer::graph
