#include "ops/schema.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace twinfer {

namespace {
// By op type, then the few domains that define it: every node's shape rule
// is looked up once per inference pass (each plan for new shapes runs one),
// so no key is built and no string copied to find it.
std::unordered_map<std::string, std::vector<std::unique_ptr<OpSchema>>>& schemas() {
  static std::unordered_map<std::string, std::vector<std::unique_ptr<OpSchema>>> m;
  return m;
}
}  // namespace

void register_schema(const OpSchema& s) {
  auto& same_op = schemas()[s.op_type];
  for (auto& known : same_op)
    if (known->domain == s.domain) {
      *known = s;
      return;
    }
  same_op.push_back(std::make_unique<OpSchema>(s));
}

const OpSchema* find_schema(const std::string& domain, const std::string& op_type) {
  auto it = schemas().find(op_type);
  if (it == schemas().end()) return nullptr;
  const bool onnx = domain.empty() || domain == "ai.onnx";
  for (const auto& s : it->second)
    if (onnx ? s->domain.empty() : s->domain == domain) return s.get();
  return nullptr;
}

std::vector<std::string> registered_op_types() {
  std::vector<std::string> r;
  for (const auto& [op, same_op] : schemas())
    for (const auto& s : same_op) r.push_back(s->domain.empty() ? op : s->domain + "::" + op);
  std::sort(r.begin(), r.end());
  return r;
}

InferContext::InferContext(graph::Graph& g, const graph::Node& node, int64_t opset)
    : graph_(g), node_(node), opset_(opset) {}

const graph::Value& InferContext::input(size_t i) const {
  if (!has_input(i)) fail(ErrorKind::kModelFormat, "required input " + std::to_string(i) + " is missing");
  return graph_.values[node_.inputs[i]];
}

const SymShape& InferContext::input_shape(size_t i) const {
  const auto& v = input(i);
  if (!v.has_shape) fail(ErrorKind::kShape, "rank of input '" + v.name + "' is unknown");
  return v.shape;
}

bool InferContext::input_known(size_t i) const {
  const auto& v = input(i);
  return v.has_shape && sym_shape_known(v.shape);
}

Shape InferContext::input_values_shape(size_t i) const {
  if (!input_known(i)) fail(ErrorKind::kShape, "shape of input '" + input(i).name + "' is not known");
  return sym_shape_values(input(i).shape);
}

const Tensor* InferContext::input_constant(size_t i) const {
  if (!has_input(i)) return nullptr;
  const auto& v = graph_.values[node_.inputs[i]];
  if (v.is_constant()) return &v.constant;
  if (asked_) asked_->push_back(node_.inputs[i]);
  return nullptr;
}

bool InferContext::constant_ints(size_t i, std::vector<int64_t>* out) const {
  const Tensor* t = input_constant(i);
  if (!t) return false;
  out->clear();
  if (t->dtype() == DType::kInt64) {
    const int64_t* p = t->data_as<int64_t>();
    out->assign(p, p + t->numel());
  } else if (t->dtype() == DType::kInt32) {
    const int32_t* p = t->data_as<int32_t>();
    out->assign(p, p + t->numel());
  } else {
    fail(ErrorKind::kDType, std::string("expected an int64 input, got ") + dtype_name(t->dtype()));
  }
  return true;
}

bool InferContext::partial_ints(size_t i, std::vector<std::optional<int64_t>>* out) const {
  if (!has_input(i)) return false;
  const auto& v = graph_.values[node_.inputs[i]];
  std::vector<int64_t> full;
  if (v.is_constant()) {
    if (v.constant.dtype() != DType::kInt64 && v.constant.dtype() != DType::kInt32) return false;
    constant_ints(i, &full);
    out->assign(full.begin(), full.end());
    return true;
  }
  if (asked_) asked_->push_back(node_.inputs[i]);
  if (v.partial.empty()) return false;
  *out = v.partial;
  return true;
}

void InferContext::set_output(size_t i, DType dtype, SymShape shape) {
  if (!has_output(i)) return;
  auto& v = graph_.values[node_.outputs[i]];
  v.partial.clear();  // the rule's types first; graph/passes/partial_values.h then
  v.dtype = dtype;
  v.has_shape = true;
  v.shape = std::move(shape);
}

void InferContext::set_output_rank_unknown(size_t i, DType dtype) {
  if (!has_output(i)) return;
  auto& v = graph_.values[node_.outputs[i]];
  v.partial.clear();
  v.dtype = dtype;
  v.has_shape = false;
  v.shape.clear();
}

void InferContext::set_output_container(size_t i, DType kind, std::vector<DType> elem_type) {
  if (!has_output(i)) return;
  auto& v = graph_.values[node_.outputs[i]];
  v.dtype = kind;
  v.elem_type = std::move(elem_type);
  v.has_shape = false;
  v.shape.clear();
}

void InferContext::fail(ErrorKind kind, const std::string& msg) const {
  throw Error(kind, msg, node_.name, node_.op_type);
}

void infer_same_as_input0(InferContext& c) {
  const auto& v = c.input(0);
  if (dtype_is_container(v.dtype))  // Identity of a sequence/optional
    c.set_output_container(0, v.dtype, v.elem_type);
  else if (v.has_shape)
    c.set_output(0, v.dtype, v.shape);
  else
    c.set_output_rank_unknown(0, v.dtype);
}

static void broadcast_into(InferContext& c, DType out) {
  SymShape s;
  bool first = true;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    if (!c.has_input(i)) continue;
    if (!c.input_has_shape(i)) {
      c.set_output_rank_unknown(0, out);
      return;
    }
    try {
      s = first ? c.input_shape(i) : broadcast_sym_shapes(s, c.input_shape(i));
    } catch (const Error& e) {
      c.fail(ErrorKind::kShape, e.what());
    }
    first = false;
  }
  c.set_output(0, out, s);
}

void infer_broadcast(InferContext& c) { broadcast_into(c, c.input_dtype(0)); }
void infer_broadcast_bool(InferContext& c) { broadcast_into(c, DType::kBool); }

int64_t normalize_axis(const InferContext& c, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    c.fail(ErrorKind::kShape, "axis " + std::to_string(axis) + " is out of range for rank " +
                                  std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

}  // namespace twinfer
