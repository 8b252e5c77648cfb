#include "graph/passes/unroll_loops.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <unordered_map>

#include "graph/passes/expand_contrib_util.h"
#include "graph/passes/pass_switch.h"
#include "graph/passes/rewrite_util.h"
#include "graph/passes/shape_inputs.h"
#include "graph/subgraph.h"

namespace twinfer::passes {

namespace {

int64_t read_unroll_budget() {
  if (!pass_enabled("TWINFER_UNROLL_LOOPS")) return 0;
  const char* s = std::getenv("TWINFER_UNROLL_MAX_NODES");
  if (s && *s) {
    char* end = nullptr;
    const long long v = std::strtoll(s, &end, 10);
    if (end && *end == '\0' && v >= 0) return v;
  }
  return kMaxUnrolledNodes;
}

bool is_loop(const graph::Node& n) { return n.domain.empty() && (n.op_type == "Scan" || n.op_type == "Loop"); }

const graph::Graph* body_of(const graph::Node& n) {
  const graph::Attribute* a = n.attr("body");
  return a && a->g ? a->g.get() : nullptr;
}

// Copies of one loop's body into g, one per iteration: body inputs bound to
// the values given, the outer values it reads bound to what the loop node
// captured, its constants added to g once and shared by every copy.
class BodyCopies {
 public:
  BodyCopies(graph::Graph& g, const graph::Node& loop, const graph::Graph& body, std::vector<graph::Node>* added)
      : g_(g), body_(body), outer_(graph::captured_inputs(loop)), added_(added),
        prefix_(loop.name.empty() ? loop.op_type : loop.name), shared_(body.values.size(), -1) {}

  const std::string& prefix() const { return prefix_; }

  // One copy bound to `bind` (one value of g per body input); *outs gets
  // the body outputs' values in g. False when the body reads a name that
  // neither it nor the loop defines.
  bool copy(const std::vector<int>& bind, int64_t iteration, std::vector<int>* outs) {
    std::vector<int> id(body_.values.size(), -1);
    for (size_t i = 0; i < body_.inputs.size() && i < bind.size(); ++i) id[body_.inputs[i]] = bind[i];
    const std::string p = prefix_ + "/" + std::to_string(iteration) + "/";
    for (size_t v = 0; v < body_.values.size(); ++v) {
      if (id[v] >= 0) continue;
      const graph::Value& bv = body_.values[v];
      if (bv.is_constant()) {
        if (shared_[v] < 0) shared_[v] = add_constant(g_, prefix_ + "/" + bv.name, bv.constant);
        id[v] = shared_[v];
      } else if (bv.producer >= 0) {
        id[v] = add_value(g_, p + bv.name);
        graph::Value& nv = g_.values[id[v]];
        nv.dtype = bv.dtype;
        nv.elem_type = bv.elem_type;
        // Only concrete shapes: a body's symbolic dims are named in its own
        // scope; inference gives the copies their concrete shapes.
        if (bv.has_shape && sym_shape_known(bv.shape)) {
          nv.has_shape = true;
          nv.shape = bv.shape;
        }
      } else {
        auto it = outer_.find(bv.name);
        if (it != outer_.end()) id[v] = it->second;
      }
    }
    for (const graph::Node& bn : body_.nodes) {
      graph::Node c = bn;
      c.name = p + bn.name;
      for (int& in : c.inputs)
        if (in >= 0) {
          if (id[in] < 0) return false;
          in = id[in];
        }
      for (int& out : c.outputs)
        if (out >= 0) out = id[out];
      added_->push_back(std::move(c));
    }
    outs->clear();
    for (int o : body_.outputs) {
      if (o < 0 || id[o] < 0) return false;
      outs->push_back(id[o]);
    }
    return true;
  }

 private:
  graph::Graph& g_;
  const graph::Graph& body_;
  std::unordered_map<std::string, int> outer_;
  std::vector<graph::Node>* added_;
  std::string prefix_;
  std::vector<int> shared_;  // body constant -> its one copy in g
};

// Makes the loop's output `o` the value `r`: its readers read r instead (a
// graph output keeps its name through an Identity).
void connect(graph::Graph& g, int o, int r, const std::string& name, std::vector<graph::Node>* added) {
  if (o < 0) return;
  if (is_graph_output(g, o)) {
    graph::Node copy;
    copy.name = name;
    copy.op_type = "Identity";
    copy.inputs = {r};
    copy.outputs = {o};
    added->push_back(std::move(copy));
    return;
  }
  replace_uses(g, o, r);
  for (graph::Node& a : *added)
    for (int& in : a.inputs)
      if (in == o) in = r;
}

// Stacks one output's per-iteration parts along `axis` into value `out`
// (rank of a part + 1; negative counts from the back, as Scan's
// scan_output_axes and Unsqueeze's axes both do).
void stack_parts(contrib::Builder& b, const std::vector<int>& parts, int64_t axis, int out, const std::string& what) {
  std::vector<int> unsqueezed;
  for (size_t t = 0; t < parts.size(); ++t)
    unsqueezed.push_back(b.unsqueeze(parts[t], {axis}, what + "_part" + std::to_string(t)));
  b.node("Concat", unsqueezed, {out}, {{"axis", int_attr(axis)}});
}

// Whether `iterations` copies of `per_iteration` nodes, plus `extra`, fit in
// `budget` (no overflow: a trip count may be anything up to 2^63 - 1);
// *nodes gets the total when they do.
bool fits(int64_t iterations, int64_t per_iteration, int64_t extra, int64_t budget, int64_t* nodes) {
  per_iteration = std::max<int64_t>(per_iteration, 1);  // each copy adds a constant at least
  if (extra > budget || iterations > (budget - extra) / per_iteration) return false;
  *nodes = iterations * per_iteration + extra;
  return true;
}

std::string too_many(int64_t budget) {
  return "unrolled it would add more nodes than the " + std::to_string(budget) + " left of the plan's limit of " +
         std::to_string(unroll_budget()) + " (TWINFER_UNROLL_MAX_NODES)";
}

int scalar_int64(graph::Graph& g, std::map<int64_t, int>& cache, const std::string& name, int64_t v) {
  auto it = cache.find(v);
  if (it != cache.end()) return it->second;
  Tensor t = Tensor::empty(DType::kInt64, {});
  *t.data_as<int64_t>() = v;
  return cache[v] = add_constant(g, name + std::to_string(v), std::move(t));
}

// Whether the body's condition output is its condition input (through
// Identities) or a constant true: then a loop entered with true stays true.
bool condition_stays_true(const graph::Graph& body) {
  if (body.inputs.size() < 2 || body.outputs.empty()) return false;
  int v = body.outputs[0];
  for (int hops = 0; v >= 0 && hops < 64; ++hops) {
    if (v == body.inputs[1]) return true;
    const graph::Value& bv = body.values[v];
    if (bv.is_constant())
      return bv.constant.dtype() == DType::kBool && bv.constant.numel() == 1 && *bv.constant.data_as<bool>();
    if (bv.producer < 0) return false;
    const graph::Node& p = body.nodes[bv.producer];
    if (!p.domain.empty()) return false;
    if (p.op_type == "Identity" && p.inputs.size() == 1) {
      v = p.inputs[0];
      continue;
    }
    if (p.op_type == "Constant" && p.inputs.empty()) {
      const graph::Attribute* a = p.attr("value");
      return a && a->t.defined() && a->t.dtype() == DType::kBool && a->t.numel() == 1 && *a->t.data_as<bool>();
    }
    return false;
  }
  return false;
}

// Scan (opset 9 on): "" when unrolled into *added (within *budget nodes,
// which it lowers), else why not.
std::string unroll_scan(graph::Graph& g, const graph::Node& n, int64_t opset, int64_t* budget,
                        std::vector<graph::Node>* added) {
  const std::string fixed = static_unroll_refusal(g, n, opset);
  if (!fixed.empty()) return fixed;
  const graph::Graph& body = *body_of(n);
  const size_t explicit_inputs = graph::explicit_input_count(n);
  const int64_t scan_in = n.attr_int("num_scan_inputs", 0);
  const size_t states = explicit_inputs - static_cast<size_t>(scan_in);
  const size_t scan_out = body.outputs.size() - states;
  const auto in_axes = n.attr_ints("scan_input_axes", std::vector<int64_t>(scan_in, 0));
  const auto in_dirs = n.attr_ints("scan_input_directions", std::vector<int64_t>(scan_in, 0));
  const auto out_axes = n.attr_ints("scan_output_axes", std::vector<int64_t>(scan_out, 0));
  const auto out_dirs = n.attr_ints("scan_output_directions", std::vector<int64_t>(scan_out, 0));

  // The length: every scan input's dim along its axis (the kernel names a
  // mismatch; left to it).
  int64_t length = -1;
  std::vector<int64_t> axes;
  for (int64_t j = 0; j < scan_in; ++j) {
    Shape s;
    if (!concrete_shape(g, n.inputs[states + j], &s)) return "a scan input's shape is not known when the plan is built";
    const int64_t r = static_cast<int64_t>(s.size());
    int64_t a = in_axes[j];
    if (a < -r || a >= r) return "a scan axis is out of range";
    if (a < 0) a += r;
    if (length >= 0 && s[a] != length) return "its scan inputs differ in length";
    length = s[a];
    axes.push_back(a);
  }
  if (length < 1) return "no iterations";
  int64_t nodes = 0;
  const int64_t per_iteration = static_cast<int64_t>(body.nodes.size()) + scan_in + static_cast<int64_t>(scan_out);
  if (!fits(length, per_iteration, static_cast<int64_t>(scan_out), *budget, &nodes)) return too_many(*budget);

  BodyCopies copies(g, n, body, added);
  contrib::Builder b(g, n, *added, opset);
  std::map<int64_t, int> positions;
  std::vector<int> state(n.inputs.begin(), n.inputs.begin() + states);
  std::vector<std::vector<int>> parts(scan_out);
  std::vector<int> outs;
  for (int64_t t = 0; t < length; ++t) {
    std::vector<int> bind = state;
    for (int64_t j = 0; j < scan_in; ++j) {
      const int x = n.inputs[states + j];
      const int64_t pos = in_dirs[j] ? length - 1 - t : t;
      const int at = scalar_int64(g, positions, copies.prefix() + "/position_", pos);
      const int slice = add_value(g, copies.prefix() + "/" + std::to_string(t) + "/" + g.values[x].name + "_slice");
      g.values[slice].dtype = g.values[x].dtype;
      b.node("Gather", {x, at}, {slice}, {{"axis", int_attr(axes[j])}});
      bind.push_back(slice);
    }
    if (!copies.copy(bind, t, &outs)) return "its body reads a value nothing defines";
    state.assign(outs.begin(), outs.begin() + states);
    for (size_t k = 0; k < scan_out; ++k) parts[k].push_back(outs[states + k]);
  }
  for (size_t k = 0; k < scan_out; ++k) {
    if (out_dirs[k]) std::reverse(parts[k].begin(), parts[k].end());
    if (n.outputs[states + k] >= 0)
      stack_parts(b, parts[k], out_axes[k], n.outputs[states + k], "scan_output" + std::to_string(k));
  }
  for (size_t i = 0; i < states; ++i)
    connect(g, n.outputs[i], state[i], copies.prefix() + "/state_" + std::to_string(i), added);
  *budget -= nodes;
  return "";
}

// Loop: "" when unrolled into *added (within *budget nodes, which it
// lowers), else why not.
std::string unroll_loop(graph::Graph& g, const graph::Node& n, int64_t opset, int64_t* budget,
                        std::vector<graph::Node>* added) {
  const std::string fixed = static_unroll_refusal(g, n, opset);
  if (!fixed.empty()) return fixed;
  const graph::Graph& body = *body_of(n);
  const size_t explicit_inputs = graph::explicit_input_count(n);
  const size_t carried = explicit_inputs - 2;
  const size_t scan_out = body.outputs.size() - 1 - carried;
  const graph::Value& mv = g.values[n.inputs[0]];
  if (!mv.is_constant() || mv.constant.numel() != 1 || mv.constant.dtype() != DType::kInt64)
    return "its trip count is not known when the plan is built (it comes from input data, or from an input "
           "whose values the engine stopped keying plans by after " + std::to_string(kMaxSteeringValues) +
           " distinct ones)";
  int64_t trips = std::max<int64_t>(*mv.constant.data_as<int64_t>(), 0);
  const int cond = n.inputs[1];
  if (cond >= 0) {
    const graph::Value& cv = g.values[cond];
    if (!cv.is_constant() || cv.constant.numel() != 1 || cv.constant.dtype() != DType::kBool)
      return "its condition is not known when the plan is built";
    if (!*cv.constant.data_as<bool>()) trips = 0;
  }
  BodyCopies copies(g, n, body, added);
  if (trips == 0) {
    // Never entered: the carried values come out as they went in. Scan
    // outputs would be empty stacks of parts whose shapes no run gives.
    if (scan_out) return "no iterations, and its scan outputs' part shapes are not known";
    for (size_t i = 0; i < carried; ++i)
      connect(g, n.outputs[i], n.inputs[2 + i], copies.prefix() + "/carried_" + std::to_string(i), added);
    return "";
  }
  int64_t nodes = 0;
  const int64_t per_iteration = static_cast<int64_t>(body.nodes.size()) + static_cast<int64_t>(scan_out);
  if (!fits(trips, per_iteration, static_cast<int64_t>(scan_out), *budget, &nodes)) return too_many(*budget);

  contrib::Builder b(g, n, *added, opset);
  std::map<int64_t, int> iterations;
  Tensor yes = Tensor::empty(DType::kBool, {});
  *yes.data_as<bool>() = true;
  const int always = add_constant(g, copies.prefix() + "/condition", std::move(yes));
  std::vector<int> state(n.inputs.begin() + 2, n.inputs.begin() + explicit_inputs);
  std::vector<std::vector<int>> parts(scan_out);
  std::vector<int> outs;
  for (int64_t t = 0; t < trips; ++t) {
    std::vector<int> bind{scalar_int64(g, iterations, copies.prefix() + "/iteration_", t), always};
    bind.insert(bind.end(), state.begin(), state.end());
    if (!copies.copy(bind, t, &outs)) return "its body reads a value nothing defines";
    state.assign(outs.begin() + 1, outs.begin() + 1 + carried);
    for (size_t k = 0; k < scan_out; ++k) parts[k].push_back(outs[1 + carried + k]);
  }
  for (size_t k = 0; k < scan_out; ++k)
    if (n.outputs[carried + k] >= 0)
      stack_parts(b, parts[k], 0, n.outputs[carried + k], "scan_output" + std::to_string(k));
  for (size_t i = 0; i < carried; ++i)
    connect(g, n.outputs[i], state[i], copies.prefix() + "/carried_" + std::to_string(i), added);
  *budget -= nodes;
  return "";
}

std::string scan_static_refusal(const graph::Graph& g, const graph::Node& n, int64_t opset) {
  if (opset < 9) return "Scan-8 (batched, with sequence lengths) is not unrolled";
  const graph::Graph* body = body_of(n);
  if (!body) return "no body";
  const size_t explicit_inputs = graph::explicit_input_count(n);
  const int64_t scan_in = n.attr_int("num_scan_inputs", 0);
  if (scan_in < 1 || static_cast<size_t>(scan_in) > explicit_inputs) return "num_scan_inputs does not fit its inputs";
  const size_t states = explicit_inputs - static_cast<size_t>(scan_in);
  if (body->inputs.size() != explicit_inputs || body->outputs.size() < states ||
      n.outputs.size() != body->outputs.size())
    return "its body's inputs or outputs do not match the node's";
  const size_t scan_out = body->outputs.size() - states;
  if (n.attr_ints("scan_input_axes", std::vector<int64_t>(scan_in, 0)).size() != static_cast<size_t>(scan_in) ||
      n.attr_ints("scan_input_directions", std::vector<int64_t>(scan_in, 0)).size() != static_cast<size_t>(scan_in) ||
      n.attr_ints("scan_output_axes", std::vector<int64_t>(scan_out, 0)).size() != scan_out ||
      n.attr_ints("scan_output_directions", std::vector<int64_t>(scan_out, 0)).size() != scan_out)
    return "scan axes or directions do not match its inputs and outputs";
  for (size_t i = 0; i < explicit_inputs; ++i)
    if (n.inputs[i] < 0 || dtype_is_container(g.values[n.inputs[i]].dtype))
      return "sequences or optionals among its values";
  return "";
}

std::string loop_static_refusal(const graph::Graph& g, const graph::Node& n) {
  const graph::Graph* body = body_of(n);
  if (!body) return "no body";
  const size_t explicit_inputs = graph::explicit_input_count(n);
  if (explicit_inputs < 2) return "its inputs do not match a Loop's";
  const size_t carried = explicit_inputs - 2;
  if (body->inputs.size() != carried + 2 || body->outputs.size() < carried + 1 ||
      n.outputs.size() != body->outputs.size() - 1)
    return "its body's inputs or outputs do not match the node's";
  if (n.inputs[0] < 0) return "no trip count (a while loop)";
  // The CPU kernel reads the body's condition output with or without a
  // condition input: a copy must be unable to change it.
  if (!condition_stays_true(*body)) return "its body computes the condition";
  for (size_t i = 0; i < carried; ++i)
    if (n.inputs[2 + i] < 0 || dtype_is_container(g.values[n.inputs[2 + i]].dtype))
      return "sequences or optionals among its values";
  for (int o : body->outputs)
    if (o >= 0 && dtype_is_container(body->values[o].dtype)) return "sequences or optionals among its values";
  return "";
}

}  // namespace

std::string static_unroll_refusal(const graph::Graph& g, const graph::Node& n, int64_t opset) {
  if (!is_loop(n)) return "not a Scan or Loop";
  if (!unrolling_wanted()) return "unrolling is off (TWINFER_UNROLL_LOOPS=0 or TWINFER_UNROLL_MAX_NODES=0)";
  return n.op_type == "Scan" ? scan_static_refusal(g, n, opset) : loop_static_refusal(g, n);
}

int64_t unroll_budget() { return read_unroll_budget(); }

bool unrolling_wanted() { return unroll_budget() > 0; }

bool has_loop(const graph::Graph& g) {
  if (!unrolling_wanted()) return false;
  for (const auto& n : g.nodes)
    if (is_loop(n)) return true;
  return false;
}

std::string unroll_refusal(const graph::Node& n) {
  const graph::Attribute* a = n.attr(kUnrollRefusalAttr);
  return a ? a->s : std::string();
}

int unroll_loops(graph::Graph& g, const PassContext& pc, int64_t* budget) {
  if (!unrolling_wanted()) return 0;
  std::vector<char> dead(g.nodes.size(), 0);
  std::vector<graph::Node> added;
  int count = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!is_loop(g.nodes[i])) continue;
    const graph::Node n = g.nodes[i];  // a copy: the refusal below writes to the node
    const size_t mark = added.size();
    const std::string why = n.op_type == "Scan" ? unroll_scan(g, n, pc.opset, budget, &added)
                                                : unroll_loop(g, n, pc.opset, budget, &added);
    if (why.empty()) {
      dead[i] = 1;
      ++count;
      continue;
    }
    added.resize(mark);  // values added before a refusal stay unread; the plan drops them
    g.nodes[i].attrs[kUnrollRefusalAttr] = string_attr(why);
  }
  if (!count) return 0;
  replace_fused_nodes(g, dead, added);
  pc.note("unroll_loops: " + std::to_string(count) + " Scan/Loop node(s) unrolled");
  return count;
}

void refuse_remaining_loops(graph::Graph& g, const std::string& why) {
  for (graph::Node& n : g.nodes)
    if (is_loop(n) && unroll_refusal(n).empty()) n.attrs[kUnrollRefusalAttr] = string_attr(why);
}

void note_refusals(const graph::Graph& g, const PassContext& pc) {
  std::map<std::string, int> seen;  // one line per reason, with how many loops gave it
  for (const graph::Node& n : g.nodes) {
    const std::string why = is_loop(n) ? unroll_refusal(n) : std::string();
    if (!why.empty()) ++seen[n.op_type + ": " + why];
  }
  for (const auto& [why, count] : seen)
    pc.note("unroll_loops: " + std::to_string(count) + " " + why.substr(0, why.find(':')) +
            " node(s) stay control flow:" + why.substr(why.find(':') + 1));
}

}  // namespace twinfer::passes
