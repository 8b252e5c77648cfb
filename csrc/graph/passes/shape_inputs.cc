#include "graph/passes/shape_inputs.h"

#include <algorithm>

#include "core/error.h"
#include "graph/passes/unroll_loops.h"
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

// Walks from `stack`'s values back through their producers to the graph
// inputs they are computed from, passing constants by and stopping at
// Shape / Size (their outputs fold from the plan's shapes). Calls
// at_input(value) for each graph input reached and returns false if the walk
// met what it cannot see through: a value nothing in this graph produces (a
// subgraph's outer value) or a producer `through` refuses.
template <typename AtInput, typename Through>
bool walk_back(const graph::Graph& g, std::vector<int> stack, AtInput at_input, Through through) {
  std::vector<char> seen(g.values.size(), 0), is_input(g.values.size(), 0);
  for (int v : g.inputs) is_input[v] = 1;
  bool clear = true;
  while (!stack.empty()) {
    const int v = stack.back();
    stack.pop_back();
    if (v < 0 || seen[v]) continue;
    seen[v] = 1;
    const graph::Value& val = g.values[v];
    if (val.is_constant()) continue;
    if (is_input[v]) {
      at_input(v);
      continue;
    }
    if (val.producer < 0) {
      clear = false;
      continue;
    }
    const graph::Node& p = g.nodes[val.producer];
    if (p.domain.empty() && (p.op_type == "Shape" || p.op_type == "Size")) continue;
    if (!through(p)) {
      clear = false;
      continue;
    }
    for (int in : p.inputs) stack.push_back(in);
  }
  return clear;
}

// Indices into g.inputs of the flagged values.
std::vector<int> input_indices(const graph::Graph& g, const std::vector<char>& chosen) {
  std::vector<int> r;
  for (size_t i = 0; i < g.inputs.size(); ++i)
    if (chosen[g.inputs[i]]) r.push_back(static_cast<int>(i));
  return r;
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
  std::vector<char> chosen(g.values.size(), 0);
  walk_back(
      g, std::move(wanted), [&](int v) { chosen[v] = shape_input_type(g.values[v]); },
      [](const graph::Node&) { return true; });
  return input_indices(g, chosen);
}

bool steering_input_type(const graph::Value& v) {
  if (v.is_constant() || !v.has_shape || v.shape.size() > 1) return false;
  if (v.shape.size() == 1 && !(v.shape[0].known() && v.shape[0].value == 1)) return false;
  return v.dtype == DType::kBool || dtype_is_integer(v.dtype);
}

std::vector<int> steering_input_indices(const graph::Graph& g, bool loops, int64_t opset) {
  std::vector<char> chosen(g.values.size(), 0);
  for (const auto& n : g.nodes) {
    if (!n.domain.empty() || n.inputs.empty() || n.inputs[0] < 0) continue;
    std::vector<int> roots;
    if (n.op_type == "If") roots = {n.inputs[0]};
    // A Loop's trip count and condition, where nothing else stops it from
    // unrolling (unroll_loops.h).
    if (loops && n.op_type == "Loop" && static_unroll_refusal(g, n, opset).empty()) {
      roots = {n.inputs[0]};
      if (n.inputs.size() > 1 && n.inputs[1] >= 0) roots.push_back(n.inputs[1]);
    }
    if (roots.empty()) continue;
    // The graph inputs the condition is computed from: all steering inputs,
    // or the condition reads data (or control flow's results) and no value
    // keys it.
    std::vector<int> reached;
    bool data = false;
    const bool clear = walk_back(
        g, std::move(roots),
        [&](int v) {
          if (steering_input_type(g.values[v])) reached.push_back(v);
          else data = true;
        },
        [](const graph::Node& p) {
          return p.domain.empty() && p.op_type != "If" && p.op_type != "Loop" && p.op_type != "Scan";
        });
    if (clear && !data)
      for (int v : reached) chosen[v] = 1;
  }
  return input_indices(g, chosen);
}

}  // namespace twinfer::passes
