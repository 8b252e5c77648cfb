// The graph IR every pass works on. Values are indexed by int ids; nodes
// list input/output value ids (-1 marks a missing optional input).
// The reader builds it; passes rewrite it; the planner consumes it.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/shape.h"
#include "core/tensor.h"

namespace twinfer::graph {

struct Graph;

struct Attribute {
  enum class Type { kUndefined, kFloat, kInt, kString, kTensor, kGraph, kFloats, kInts, kStrings, kTensors, kGraphs,
                    kTypeProto };
  Type type = Type::kUndefined;
  float f = 0.f;
  int64_t i = 0;
  std::string s;
  Tensor t;
  std::shared_ptr<Graph> g;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  std::vector<Tensor> tensors;
  std::vector<std::shared_ptr<Graph>> graphs;
  std::vector<DType> type_proto;  // kTypeProto: the type, outermost first ({kSequence, kFloat32})
};

struct Value {
  std::string name;
  DType dtype = DType::kUndefined;
  // Sequence/optional values (dtype kSequence/kOptional): the type inside,
  // outermost first; empty when unknown. Such values never have a shape.
  std::vector<DType> elem_type;
  bool has_shape = false;   // false: rank unknown
  SymShape shape;
  Tensor constant;          // defined for initializers and folded constants (host memory)
  // A small integer tensor (rank 0 or 1) known in part before its value is:
  // the Shape of a tensor with some dims symbolic, and what selections and
  // arithmetic make of it (graph/passes/partial_values.h). One entry per
  // element, empty when nothing is known or the value is a constant.
  // Reshape, Expand and ConstantOfShape size the dims it knows.
  std::vector<std::optional<int64_t>> partial;
  int producer = -1;        // node index, -1 for graph inputs/constants
  bool is_constant() const { return constant.defined(); }
};

struct Node {
  std::string name;
  std::string op_type;
  std::string domain;       // "" is the default ONNX domain
  std::vector<int> inputs;  // value ids, -1 for an omitted optional input
  std::vector<int> outputs; // value ids, -1 for an omitted optional output
  std::map<std::string, Attribute> attrs;

  bool has_attr(const std::string& n) const { return attrs.count(n) != 0; }
  int64_t attr_int(const std::string& n, int64_t dflt) const;
  float attr_float(const std::string& n, float dflt) const;
  std::string attr_string(const std::string& n, const std::string& dflt) const;
  std::vector<int64_t> attr_ints(const std::string& n, std::vector<int64_t> dflt = {}) const;
  std::vector<float> attr_floats(const std::string& n, std::vector<float> dflt = {}) const;
  const Attribute* attr(const std::string& n) const;
  // Throws kModelFormat naming this node when the attribute is absent.
  const Attribute& required_attr(const std::string& n) const;
};

struct Graph {
  std::string name;
  std::vector<Value> values;
  std::vector<Node> nodes;        // topologically sorted after Graph::topo_sort()
  std::vector<int> inputs;        // value ids of graph inputs (not initializers)
  std::vector<int> outputs;       // value ids of graph outputs

  // Id of the value with this name, creating it when absent.
  int value_id(const std::string& name);
  int find_value(const std::string& name) const;  // -1 when absent
  void index_value(int id);                       // find_value(values[id].name) is id from now on
  int add_node(Node n);                           // sets producers; returns node index
  // Re-establish producer links and order nodes so producers come first.
  // Throws kModelFormat on a cycle or on a value produced twice.
  void topo_sort();
  // Drop nodes no graph output depends on, and values nothing refers to.
  void remove_dead();
  // remove_dead, then renumber the values so that only those a node, an
  // input or an output refers to remain: value ids change. For a graph
  // folded from a much larger one (a plan's), every later copy and the
  // plan's own storage then cost what the folded graph holds.
  void compact();

 private:
  // Name -> id, shared by copies of the graph until one of them names a
  // value (a plan copies its source graph for every new shape); null once
  // compact() renumbers the values, built again when a value is next named
  // (find_value scans the values meanwhile).
  std::shared_ptr<std::unordered_map<std::string, int>> value_ids_;
  std::unordered_map<std::string, int>& own_value_ids();
};

struct Model {
  int64_t ir_version = 0;
  std::string producer_name;
  std::map<std::string, int64_t> opsets;  // domain -> version ("" = ai.onnx)
  Graph graph;
  std::shared_ptr<void> backing;          // keeps the file's bytes that weights borrow alive
  size_t weight_bytes_mapped = 0;         // initializer bytes borrowed in place from the file/buffer
  size_t weight_bytes_copied = 0;         // initializer bytes copied (unaligned or typed fields)
  // Initializers the graph's inputs also list: constants here, which a run
  // may override only if the engine made them inputs (EngineOptions).
  std::vector<std::string> overridable_initializers;
  int64_t opset(const std::string& domain = "") const {
    auto it = opsets.find(domain);
    return it == opsets.end() ? 0 : it->second;
  }
};

}  // namespace twinfer::graph
