#include "graph/passes/shape_inputs.h"

#include <algorithm>

#include "core/error.h"
#include "ops/schema.h"

namespace twinfer::passes {

namespace {

// Ops whose output size counts what the *data* holds (which elements are
// nonzero, selected, distinct, kept), not a size the caller chose: a plan
// keyed on such an input would be built again for nearly every run. Their
// plans stay value-dependent (the host evaluator).
bool sized_by_data(const graph::Node& n) {
  if (!n.domain.empty()) return false;
  return n.op_type == "NonZero" || n.op_type == "Compress" || n.op_type == "Unique" ||
         n.op_type == "NonMaxSuppression";
}

// A dim no rule could name: neither a number nor a symbol carried from an
// input (a Range's length, a Reshape's target read from a value).
bool unsized(const graph::Value& v) {
  if (!v.has_shape) return true;
  for (const auto& d : v.shape)
    if (!d.known() && d.symbol.empty()) return true;
  return false;
}

}  // namespace

bool shape_input_type(const graph::Value& v) {
  if (v.is_constant() || !v.has_shape || v.shape.size() > 1) return false;
  if (dtype_is_container(v.dtype) || v.dtype == DType::kString || v.dtype == DType::kUndefined) return false;
  return v.shape.empty() || !v.shape[0].known() || v.shape[0].value <= kMaxShapeInputElements;
}

std::vector<int> shape_input_indices(const graph::Graph& g, int64_t opset) {
  if (g.inputs.empty()) return {};
  // The rules run again on a copy, recording what each asks for: they write
  // their outputs' types, and the engine's graph keeps its own.
  graph::Graph copy = g;
  std::vector<int> wanted;
  for (const auto& n : copy.nodes) {
    const OpSchema* schema = find_schema(n.domain, n.op_type);
    if (!schema || sized_by_data(n)) continue;
    std::vector<int> asked;
    InferContext ic(copy, n, opset);
    ic.record_asked(&asked);
    try {
      schema->infer(ic);
    } catch (const Error&) {
      continue;  // the load already accepted the model; a rule that needs more is not ours to judge here
    }
    bool open = false;
    for (int o : n.outputs) open = open || (o >= 0 && unsized(copy.values[o]));
    if (open) wanted.insert(wanted.end(), asked.begin(), asked.end());
  }
  if (wanted.empty()) return {};

  // Back from the wanted values to the graph inputs they are computed from.
  std::vector<char> seen(g.values.size(), 0), is_input(g.values.size(), 0);
  for (int v : g.inputs) is_input[v] = 1;
  std::vector<char> chosen(g.values.size(), 0);
  while (!wanted.empty()) {
    const int v = wanted.back();
    wanted.pop_back();
    if (v < 0 || seen[v]) continue;
    seen[v] = 1;
    const graph::Value& val = g.values[v];
    if (val.is_constant()) continue;
    if (is_input[v]) {
      chosen[v] = shape_input_type(val);
      continue;
    }
    if (val.producer < 0) continue;
    const graph::Node& p = g.nodes[val.producer];
    if (p.domain.empty() && (p.op_type == "Shape" || p.op_type == "Size")) continue;
    for (int in : p.inputs) wanted.push_back(in);
  }
  std::vector<int> r;
  for (size_t i = 0; i < g.inputs.size(); ++i)
    if (chosen[g.inputs[i]]) r.push_back(static_cast<int>(i));
  return r;
}

bool steering_input_type(const graph::Value& v) {
  if (v.is_constant() || !v.has_shape || v.shape.size() > 1) return false;
  if (v.shape.size() == 1 && !(v.shape[0].known() && v.shape[0].value == 1)) return false;
  return v.dtype == DType::kBool || dtype_is_integer(v.dtype);
}

std::vector<int> steering_input_indices(const graph::Graph& g) {
  std::vector<char> is_input(g.values.size(), 0), chosen(g.values.size(), 0);
  for (int v : g.inputs) is_input[v] = 1;
  for (const auto& n : g.nodes) {
    if (!n.domain.empty() || n.op_type != "If" || n.inputs.empty() || n.inputs[0] < 0) continue;
    // The graph inputs the condition is computed from (Shape / Size give
    // what the plan's shapes fold): all steering inputs, or the condition
    // reads data and no value keys it.
    std::vector<char> seen(g.values.size(), 0);
    std::vector<int> stack{n.inputs[0]}, reached;
    bool data = false;
    while (!stack.empty() && !data) {
      const int v = stack.back();
      stack.pop_back();
      if (v < 0 || seen[v]) continue;
      seen[v] = 1;
      const graph::Value& val = g.values[v];
      if (val.is_constant()) continue;
      if (is_input[v]) {
        if (steering_input_type(val)) reached.push_back(v);
        else data = true;
        continue;
      }
      if (val.producer < 0) {
        data = true;  // an outer value of a subgraph: not this graph's to key
        continue;
      }
      const graph::Node& p = g.nodes[val.producer];
      if (p.domain.empty() && (p.op_type == "Shape" || p.op_type == "Size")) continue;
      if (!p.domain.empty() || p.op_type == "If" || p.op_type == "Loop" || p.op_type == "Scan") {
        data = true;  // a condition computed by control flow: left to it
        continue;
      }
      for (int in : p.inputs) stack.push_back(in);
    }
    if (!data)
      for (int v : reached) chosen[v] = 1;
  }
  std::vector<int> r;
  for (size_t i = 0; i < g.inputs.size(); ++i)
    if (chosen[g.inputs[i]]) r.push_back(static_cast<int>(i));
  return r;
}

}  // namespace twinfer::passes
