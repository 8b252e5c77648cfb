#include "graph/passes/partial_values.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <unordered_map>

#include "graph/passes/infer_and_fold.h"
#include "graph/passes/pass_switch.h"
#include "ops/tensor/shape_range.h"

namespace twinfer::passes {

namespace {

using Partial = std::vector<std::optional<int64_t>>;

bool is_int(DType t) { return t == DType::kInt64 || t == DType::kInt32 || t == DType::kBool; }

// A rank-0 or rank-1 integer value of known, small length.
bool small_int(const graph::Value& v) {
  if (!is_int(v.dtype) || !v.has_shape || v.shape.size() > 1 || !sym_shape_known(v.shape)) return false;
  return v.shape.empty() || v.shape[0].value <= kMaxPartialElements;
}

int64_t numel_of(const graph::Value& v) { return v.shape.empty() ? 1 : v.shape[0].value; }

int64_t element(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kInt64: return t.data_as<const int64_t>()[i];
    case DType::kInt32: return t.data_as<const int32_t>()[i];
    default: return t.data_as<const uint8_t>()[i] != 0;
  }
}

void set_element(Tensor& t, int64_t i, int64_t v) {
  switch (t.dtype()) {
    case DType::kInt64: t.data_as<int64_t>()[i] = v; break;
    case DType::kInt32: t.data_as<int32_t>()[i] = static_cast<int32_t>(v); break;
    default: t.data_as<uint8_t>()[i] = v != 0; break;
  }
}

// The elements of `v` where known; all unknown when nothing is.
Partial known_elements(const graph::Value& v) {
  if (v.is_constant()) {
    Partial p(v.constant.numel());
    for (int64_t i = 0; i < v.constant.numel(); ++i) p[i] = element(v.constant, i);
    return p;
  }
  if (static_cast<int64_t>(v.partial.size()) == numel_of(v)) return v.partial;
  return Partial(numel_of(v));
}

bool any_known(const Partial& p) {
  return std::any_of(p.begin(), p.end(), [](const auto& e) { return e.has_value(); });
}

bool all_known(const Partial& p) {
  return std::all_of(p.begin(), p.end(), [](const auto& e) { return e.has_value(); });
}

enum class Kind { kNone, kSelection, kElementwise, kWhere };

// Selections move input 0's elements (every input's for Concat); the other
// inputs are parameters, which must be constants.
Kind kind_of(const graph::Node& n) {
  // A table, not a chain of string compares: asked for every node of every plan.
  static const std::unordered_map<std::string, Kind> kKinds = [] {
    std::unordered_map<std::string, Kind> m;
    for (const char* op : {"Gather", "Slice", "Concat", "Unsqueeze", "Squeeze", "Reshape", "Identity", "Flatten",
                           "Expand", "Tile", "Split"})
      m[op] = Kind::kSelection;
    for (const char* op : {"Add", "Sub", "Mul", "Div", "Mod", "Max", "Min", "Equal", "Less", "Greater", "LessOrEqual",
                           "GreaterOrEqual", "And", "Or", "Not", "Neg", "Abs", "Cast"})
      m[op] = Kind::kElementwise;
    m["Where"] = Kind::kWhere;
    return m;
  }();
  const auto it = kKinds.find(n.op_type);
  return it == kKinds.end() ? Kind::kNone : it->second;
}

bool is_data_input(const graph::Node& n, Kind kind, size_t i) {
  return kind != Kind::kSelection || i == 0 || n.op_type == "Concat";
}

// Element `i` of an operand of length `len` broadcast to the output's length.
int64_t broadcast_index(int64_t len, int64_t i) { return len == 1 ? 0 : i; }

// Stores the outputs' partial values; folds when every one is known whole.
bool finish(graph::Graph& g, const graph::Node& n, std::vector<Partial> outs, bool fold) {
  bool whole = true;
  for (const auto& p : outs) whole = whole && all_known(p);
  for (size_t k = 0; k < n.outputs.size(); ++k) {
    if (n.outputs[k] < 0) continue;
    graph::Value& v = g.values[n.outputs[k]];
    if (whole && fold) {
      if (!v.is_constant()) {  // a Shape's: made from the dims here
        Tensor t = Tensor::empty(v.dtype, sym_shape_values(v.shape));
        for (size_t i = 0; i < outs[k].size(); ++i) set_element(t, static_cast<int64_t>(i), *outs[k][i]);
        v.constant = t;
      }
      v.partial.clear();
      continue;
    }
    v.constant = Tensor();
    v.partial = any_known(outs[k]) ? std::move(outs[k]) : Partial{};
  }
  return whole && fold;
}

bool from_shape(graph::Graph& g, const graph::Node& n, const PassContext& ctx, bool fold) {
  const graph::Value& src = g.values[n.inputs[0]];
  if (!src.has_shape) return false;
  const auto [begin, end] = tensor::shape_range(n, ctx.opset, static_cast<int64_t>(src.shape.size()));
  Partial p;
  for (int64_t d = begin; d < end; ++d)
    p.push_back(src.shape[d].known() ? std::optional<int64_t>(src.shape[d].value) : std::nullopt);
  if (static_cast<int64_t>(p.size()) != numel_of(g.values[n.outputs[0]])) return false;
  return finish(g, n, {std::move(p)}, fold);
}

}  // namespace

bool partial_values_enabled() {
  static const bool on = pass_enabled("TWINFER_PARTIAL_VALUES");  // read once: asked per node
  return on;
}

bool propagate_partial(graph::Graph& g, const graph::Node& n, const PassContext& ctx, bool fold) {
  if (!partial_values_enabled()) return false;
  if (!n.domain.empty() || n.inputs.empty() || n.inputs[0] < 0 || n.outputs.empty()) return false;
  for (int o : n.outputs)
    if (o >= 0 && !small_int(g.values[o])) return false;
  if (n.op_type == "Shape") return n.outputs[0] >= 0 && from_shape(g, n, ctx, fold);
  const Kind kind = kind_of(n);
  if (kind == Kind::kNone) return false;

  // Operands: their known elements, and whether any is known at all.
  std::vector<Partial> in(n.inputs.size());
  bool some_known = false;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (n.inputs[i] < 0) continue;
    const graph::Value& v = g.values[n.inputs[i]];
    if (!is_data_input(n, kind, i)) {
      if (!v.is_constant()) return false;
      continue;
    }
    if (!small_int(v)) return false;
    if (kind == Kind::kSelection && v.dtype != DType::kInt64) return false;  // sentinels are int64
    in[i] = known_elements(v);
    some_known = some_known || any_known(in[i]);
  }
  if (!some_known) return false;

  // Stand-ins for the operands that are not constants: a distinct sentinel
  // per unknown element of a selection (below any element that is known),
  // a placeholder 1 for arithmetic.
  const int64_t sentinel0 = std::numeric_limits<int64_t>::min() + 1;
  int64_t sentinels = 0;
  std::vector<int> stood_in;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (n.inputs[i] < 0 || !is_data_input(n, kind, i)) continue;
    graph::Value& v = g.values[n.inputs[i]];
    if (v.is_constant()) continue;
    Tensor t = Tensor::empty(v.dtype, sym_shape_values(v.shape));
    for (size_t e = 0; e < in[i].size(); ++e)
      set_element(t, static_cast<int64_t>(e),
                  in[i][e] ? *in[i][e] : kind == Kind::kSelection ? sentinel0 + sentinels++ : 1);
    v.constant = t;
    stood_in.push_back(n.inputs[i]);
  }
  if (kind == Kind::kSelection)
    for (const auto& p : in)
      for (const auto& e : p)
        if (e && *e >= sentinel0 && *e < sentinel0 + sentinels) sentinels = -1;  // a known element looks like one
  // The stand-ins go whatever happens (an exception included): a value
  // left holding one would pass for a constant.
  struct Restore {
    graph::Graph& g;
    const std::vector<int>& values;
    ~Restore() {
      for (int v : values) g.values[v].constant = Tensor();
    }
  };
  bool ran = false;
  {
    Restore restore{g, stood_in};
    if (sentinels >= 0) {
      try {
        ran = fold_node(g, n, ctx);
      } catch (const Error&) {
        ran = false;  // the node's rule has its say once the values are known
      }
    }
  }
  if (!ran) {
    for (int o : n.outputs)
      if (o >= 0) g.values[o].constant = Tensor();
    return false;
  }

  std::vector<Partial> outs(n.outputs.size());
  for (size_t k = 0; k < n.outputs.size(); ++k) {
    if (n.outputs[k] < 0) continue;
    const Tensor& t = g.values[n.outputs[k]].constant;
    Partial& p = outs[k];
    p.resize(t.numel());
    for (int64_t e = 0; e < t.numel(); ++e) {
      const int64_t x = element(t, e);
      bool known = true;
      if (kind == Kind::kSelection) {
        known = !(x >= sentinel0 && x < sentinel0 + sentinels);
      } else if (kind == Kind::kElementwise) {
        for (const auto& op : in)
          if (!op.empty() && !op[broadcast_index(static_cast<int64_t>(op.size()), e)]) known = false;
      } else {  // Where(cond, x, y): the condition and the operand it picks
        const auto& cond = in[0][broadcast_index(static_cast<int64_t>(in[0].size()), e)];
        const Partial& picked = cond && *cond ? in[1] : in[2];
        known = cond && picked[broadcast_index(static_cast<int64_t>(picked.size()), e)];
      }
      if (known) p[e] = x;
    }
  }
  return finish(g, n, std::move(outs), fold);
}

}  // namespace twinfer::passes
