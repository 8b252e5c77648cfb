// An op's shape/type rule, registered once in the op's own file:
//
//   TWINFER_REGISTER_SCHEMA("Relu", infer_same_as_input0);
//
// Rules see symbolic shapes at load time and concrete ones once the input
// shapes are known; constant inputs (e.g. Reshape's shape) are visible.
#pragma once
#include <string>
#include <vector>

#include "graph/ir.h"

namespace twinfer {

class InferContext {
 public:
  InferContext(graph::Graph& g, const graph::Node& node, int64_t opset);

  const graph::Node& node() const { return node_; }
  int64_t opset() const { return opset_; }
  // The eager evaluator's pass (runtime/evaluate.h): every input is a
  // constant and a node whose output shape stays unknown is run by its
  // kernel's run_dynamic, so a rule need not compute a value to size it.
  bool evaluating() const { return evaluating_; }
  void set_evaluating(bool e) { evaluating_ = e; }
  size_t num_inputs() const { return node_.inputs.size(); }
  size_t num_outputs() const { return node_.outputs.size(); }
  bool has_input(size_t i) const { return i < node_.inputs.size() && node_.inputs[i] >= 0; }
  bool has_output(size_t i) const { return i < node_.outputs.size() && node_.outputs[i] >= 0; }
  const graph::Value& input(size_t i) const;     // throws kModelFormat when absent
  DType input_dtype(size_t i) const { return input(i).dtype; }
  bool input_has_shape(size_t i) const { return input(i).has_shape; }
  const SymShape& input_shape(size_t i) const;   // throws kShape when rank unknown
  bool input_known(size_t i) const;              // rank and every dim known
  Shape input_values_shape(size_t i) const;      // concrete shape; throws when unknown
  const Tensor* input_constant(size_t i) const;  // nullptr when not a constant
  // Every input whose value the rule asks for (input_constant, constant_ints)
  // and cannot have is appended to `*asked` (value ids): the inputs a shape
  // waits for (graph/passes/shape_inputs.h).
  void record_asked(std::vector<int>* asked) { asked_ = asked; }
  // Reads an int64/int32 constant input as a list; false when not constant.
  bool constant_ints(size_t i, std::vector<int64_t>* out) const;
  // An integer input's elements where known: a constant's all of them, a
  // computed one's those its partial value knows (graph::Value::partial).
  // False when none is known.
  bool partial_ints(size_t i, std::vector<std::optional<int64_t>>* out) const;

  void set_output(size_t i, DType dtype, SymShape shape);
  void set_output_rank_unknown(size_t i, DType dtype);
  // A sequence/optional output (kind kSequence/kOptional) holding `elem_type`
  // (outermost first; empty when unknown). Such values have no shape.
  void set_output_container(size_t i, DType kind, std::vector<DType> elem_type);

  // Shape rules test and then fail (`if (!ok) c.fail(...)`): the message,
  // often built from shapes, is built only on failure (rules run for every
  // node of every plan; a check(cond, msg) built it every time).
  [[noreturn]] void fail(ErrorKind kind, const std::string& msg) const;

 private:
  graph::Graph& graph_;
  const graph::Node& node_;
  int64_t opset_;
  std::vector<int>* asked_ = nullptr;
  bool evaluating_ = false;
};

using InferFn = void (*)(InferContext&);

struct OpSchema {
  std::string op_type;
  std::string domain;   // "" for ai.onnx
  InferFn infer;
};

void register_schema(const OpSchema& s);
const OpSchema* find_schema(const std::string& domain, const std::string& op_type);
std::vector<std::string> registered_op_types();

struct SchemaRegistrar {
  SchemaRegistrar(const char* op, InferFn fn, const char* domain = "") {
    register_schema(OpSchema{op, domain, fn});
  }
};

#define TWINFER_CONCAT_INNER(a, b) a##b
#define TWINFER_CONCAT(a, b) TWINFER_CONCAT_INNER(a, b)
#define TWINFER_REGISTER_SCHEMA(op, fn, ...) \
  static ::twinfer::SchemaRegistrar TWINFER_CONCAT(schema_reg_, __COUNTER__)(op, fn, ##__VA_ARGS__)

// Common rules.
void infer_same_as_input0(InferContext& c);      // one output: dtype and shape of input 0
void infer_broadcast(InferContext& c);           // numpy broadcast of all inputs, dtype of input 0
void infer_broadcast_bool(InferContext& c);      // broadcast of inputs, bool output (comparisons)

// Normalise a possibly negative axis against a rank; throws kShape naming the node.
int64_t normalize_axis(const InferContext& c, int64_t axis, int64_t rank);

}  // namespace twinfer
