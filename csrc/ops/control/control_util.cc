#include "ops/control/control_util.h"

#include <algorithm>

#include <cstring>

#include "graph/passes/infer_and_fold.h"
#include "graph/subgraph.h"

namespace twinfer::control {

ValueType input_type(const InferContext& c, size_t i) {
  const auto& v = c.input(i);
  return ValueType{v.dtype, v.has_shape, v.shape, v.elem_type};
}

void set_output_type(InferContext& c, size_t i, const ValueType& t) {
  if (!c.has_output(i)) return;
  if (dtype_is_container(t.dtype))
    c.set_output_container(i, t.dtype, t.elem_type);
  else if (t.has_shape)
    c.set_output(i, t.dtype, t.shape);
  else
    c.set_output_rank_unknown(i, t.dtype);
}

std::vector<ValueType> infer_subgraph(const InferContext& c, const graph::Graph& sub,
                                      const std::vector<ValueType>& inputs) {
  graph::Graph g = sub;
  for (size_t i = 0; i < g.inputs.size() && i < inputs.size(); ++i) {
    auto& v = g.values[g.inputs[i]];
    if (inputs[i].dtype != DType::kUndefined) v.dtype = inputs[i].dtype;
    if (!inputs[i].elem_type.empty()) v.elem_type = inputs[i].elem_type;
    if (dtype_is_container(v.dtype)) {
      v.has_shape = false;  // sequences/optionals have no shape
      v.shape.clear();
    } else if (inputs[i].has_shape) {
      v.has_shape = true;
      v.shape = inputs[i].shape;
    }
  }
  const graph::Attribute* names = c.node().attr(graph::kImplicitAttr);
  const size_t first = graph::explicit_input_count(c.node());
  if (names)
    for (size_t k = 0; k < names->strings.size(); ++k) {
      const int id = g.find_value(names->strings[k]);
      if (id < 0) continue;
      const auto& outer = c.input(first + k);
      auto& v = g.values[id];
      v.dtype = outer.dtype;
      v.elem_type = outer.elem_type;
      v.has_shape = outer.has_shape;
      v.shape = outer.shape;
      if (outer.is_constant()) v.constant = outer.constant;
    }
  passes::PassContext pc;
  pc.opset = c.opset();
  passes::infer_and_fold(g, pc, true);
  std::vector<ValueType> out;
  for (int o : g.outputs) {
    const auto& v = g.values[o];
    out.push_back(ValueType{v.dtype, v.has_shape, v.shape, v.elem_type});
  }
  return out;
}

ValueType merge_types(const InferContext& c, const ValueType& a, const ValueType& b, size_t output) {
  if (a.dtype != DType::kUndefined && b.dtype != DType::kUndefined && a.dtype != b.dtype)
    c.fail(ErrorKind::kDType, "the branches give output " + std::to_string(output) + " different types (" +
                                  dtype_name(a.dtype) + " and " + dtype_name(b.dtype) + ")");
  ValueType r;
  r.dtype = a.dtype != DType::kUndefined ? a.dtype : b.dtype;
  if (dtype_is_container(r.dtype)) {
    // A branch may leave the type inside unknown (an empty sequence/optional
    // typed later); the other's then stands.
    if (!a.elem_type.empty() && !b.elem_type.empty() && a.elem_type != b.elem_type)
      c.fail(ErrorKind::kDType, "the branches give output " + std::to_string(output) + " different types (" +
                                    type_str(a.dtype, a.elem_type) + " and " + type_str(b.dtype, b.elem_type) + ")");
    r.elem_type = a.elem_type.empty() ? b.elem_type : a.elem_type;
    return r;
  }
  if (!a.has_shape || !b.has_shape || a.shape.size() != b.shape.size()) return r;
  r.has_shape = true;
  for (size_t d = 0; d < a.shape.size(); ++d) {
    const Dim& x = a.shape[d];
    const Dim& y = b.shape[d];
    const bool same = (x.known() && y.known() && x.value == y.value) ||
                      (!x.known() && !y.known() && !x.symbol.empty() && x.symbol == y.symbol);
    r.shape.push_back(same ? x : Dim());
  }
  return r;
}

Body::Body(const KernelBuildInfo& info, const char* attr) {
  const graph::Attribute& a = info.node().required_attr(attr);
  if (!a.g) info.fail(ErrorKind::kModelFormat, std::string("attribute '") + attr + "' is not a graph");
  graph_ = a.g;
  if (const graph::Attribute* names = info.node().attr(graph::kImplicitAttr)) outer_names_ = names->strings;
  outer_first_ = graph::explicit_input_count(info.node());
  options_.opset = info.opset();
  options_.precision = info.precision();
  reuse_ = make_kernel_reuse();
  options_.reuse = reuse_.get();
}

std::vector<Tensor> Body::run(const std::vector<Tensor>& inputs, const KernelContext& ctx) const {
  std::vector<std::pair<std::string, Tensor>> outer;
  for (size_t k = 0; k < outer_names_.size(); ++k)
    outer.emplace_back(outer_names_[k], borrow_view(ctx.inputs[outer_first_ + k]));
  EvalOptions o = options_;
  o.num_threads = ctx.num_threads;
  if (reuse_) reuse_->begin_run();
  return evaluate_subgraph(*graph_, inputs, outer, o);
}

Shape empty_part_shape(const KernelBuildInfo& info, size_t node_output, const std::vector<int64_t>& added,
                       const graph::Value& body_output) {
  // Per dim: the plan's if known, else the body's declaration if known, else 0.
  SymShape part;
  bool have_part = false;
  if (info.has_output(node_output)) {
    const graph::Value& v = info.output(node_output);
    if (v.has_shape && v.shape.size() >= added.size()) {
      for (size_t d = 0; d < v.shape.size(); ++d)
        if (std::find(added.begin(), added.end(), static_cast<int64_t>(d)) == added.end()) part.push_back(v.shape[d]);
      have_part = true;
    }
  }
  if (!have_part) {
    if (!body_output.has_shape) return {};
    part = body_output.shape;
  }
  const bool body_fits = body_output.has_shape && body_output.shape.size() == part.size();
  Shape out;
  for (size_t d = 0; d < part.size(); ++d) {
    if (part[d].known()) out.push_back(part[d].value);
    else if (body_fits && body_output.shape[d].known()) out.push_back(body_output.shape[d].value);
    else out.push_back(0);
  }
  return out;
}

Tensor borrow_view(const TensorView& v) {
  return Tensor::borrow(v.data, v.dtype, v.shape, Device::cpu(), nullptr);
}

void copy_to_outputs(const std::vector<Tensor>& results, KernelContext& ctx, const std::string& node,
                     const std::string& op) {
  for (size_t i = 0; i < ctx.outputs.size() && i < results.size(); ++i) {
    TensorView& o = ctx.outputs[i];
    if (!o.data && o.numel() != 0) continue;
    if (results[i].shape() != o.shape || results[i].dtype() != o.dtype)
      throw Error(ErrorKind::kShape,
                  "output " + std::to_string(i) + " came out " + dtype_name(results[i].dtype()) +
                      shape_str(results[i].shape()) + " but the plan expected " + dtype_name(o.dtype) +
                      shape_str(o.shape),
                  node, op);
    if (o.bytes()) std::memcpy(o.data, results[i].data(), o.bytes());
  }
}

}  // namespace twinfer::control
