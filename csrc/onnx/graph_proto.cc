// GraphProto / NodeProto / ValueInfoProto -> graph::Graph. A graph is read in
// two steps: its fields are gathered (they may come in any order), then the IR
// is built once every initializer and node output is known.
#include <set>
#include <unordered_set>

#include "onnx/functions.h"
#include "onnx/parse.h"

namespace twinfer::onnx::detail {

namespace {

struct ValueInfo {
  std::string name;
  bool has_type = false;
  bool is_tensor = false;    // a tensor_type, alone or inside the containers
  const char* kind = "";     // what it is otherwise ("map", "sparse tensor", ...)
  // sequence/optional/map wrapping the tensor, outermost first (a map's key
  // type follows it: {kSequence, kMap, kInt64} for sequence(map(int64, T)))
  std::vector<DType> containers;
  int32_t elem_type = 0;
  bool has_shape = false;
  SymShape shape;
};

// dim_params that exporters write for "unknown" rather than as a name: the
// same name twice would otherwise claim two dims equal (Paddle's classifiers
// declare [-1, 3, '?', '?'] and take 48 x 192 images).
bool anonymous_dim_param(const std::string& p) { return p.empty() || p == "?" || p == "-1" || p == "None"; }

void parse_dim(wire::Reader r, SymShape& shape) {
  Dim d;
  while (r.next()) {
    switch (r.field()) {
      case 1: {
        const int64_t v = r.int64("dim_value");
        d = v >= 0 ? Dim(v) : Dim();  // some exporters wrote -1 for "unknown"
        break;
      }
      case 2: {
        std::string p = r.string("dim_param");
        d = anonymous_dim_param(p) ? Dim() : Dim(std::move(p));
        break;
      }
      default: r.skip();  // denotation
    }
  }
  shape.push_back(std::move(d));
}

void parse_tensor_type(wire::Reader r, ValueInfo& v) {
  v.is_tensor = true;
  while (r.next()) {
    switch (r.field()) {
      case 1: v.elem_type = r.int32("elem_type"); break;
      case 2: {
        v.has_shape = true;
        wire::Reader s = r.message("shape", "TensorShapeProto");
        while (s.next()) {
          if (s.field() == 1) parse_dim(s.message("dim", "TensorShapeProto.Dimension"), v.shape);
          else s.skip();
        }
        break;
      }
      default: r.skip();
    }
  }
}

void parse_type(wire::Reader r, ValueInfo& v);

// TypeProto.Sequence / TypeProto.Optional: one field, elem_type (a TypeProto).
void parse_container(wire::Reader r, DType kind, ValueInfo& v) {
  v.containers.push_back(kind);
  while (r.next()) {
    if (r.field() == 1) parse_type(r.message("elem_type", "TypeProto"), v);
    else r.skip();
  }
}

// TypeProto.Map: key_type (an element type code) and value_type (a TypeProto).
void parse_map(wire::Reader r, ValueInfo& v) {
  v.containers.push_back(DType::kMap);
  DType key = DType::kUndefined;
  wire::Reader value;
  bool has_value = false;
  while (r.next()) {
    switch (r.field()) {
      case 1: key = dtype_from_onnx(r.int32("key_type")); break;
      case 2: value = r.message("value_type", "TypeProto"); has_value = true; break;
      default: r.skip();
    }
  }
  if (key != DType::kString && !dtype_is_integer(key))
    throw Error(ErrorKind::kModelFormat, "value '" + v.name + "': a map's keys must be strings or integers");
  v.containers.push_back(key);
  if (has_value) parse_type(value, v);
}

void parse_type(wire::Reader r, ValueInfo& v) {
  v.has_type = true;
  while (r.next()) {
    switch (r.field()) {
      case 1: parse_tensor_type(r.message("tensor_type", "TypeProto.Tensor"), v); break;
      case 4: parse_container(r.message("sequence_type", "TypeProto.Sequence"), DType::kSequence, v); break;
      case 5: parse_map(r.message("map_type", "TypeProto.Map"), v); break;
      case 7: v.kind = "opaque"; r.skip(); break;
      case 8: v.kind = "sparse tensor"; r.skip(); break;
      case 9: parse_container(r.message("optional_type", "TypeProto.Optional"), DType::kOptional, v); break;
      default: r.skip();  // denotation
    }
  }
}

ValueInfo parse_value_info(wire::Reader r) {
  ValueInfo v;
  while (r.next()) {
    switch (r.field()) {
      case 1: v.name = r.string("name"); break;
      case 2: parse_type(r.message("type", "TypeProto"), v); break;
      default: r.skip();
    }
  }
  return v;
}

// Whether the declaration gives no type: no TypeProto, or an empty one
// (`type {}`), which exporters write for subgraph outputs whose type follows
// from inference (ONNX allows it; the PyTorch exporter does it in If bodies).
bool type_left_out(const ValueInfo& v) {
  return !v.has_type || (!v.is_tensor && v.containers.empty() && !*v.kind);
}

// Element dtype of a declared graph input/output (of the tensor inside, for
// sequences and optionals); tensors, sequences and optionals are supported.
// kUndefined when the type is left out (shape inference types the value).
DType declared_dtype(const ValueInfo& v, const char* role) {
  if (type_left_out(v)) return DType::kUndefined;
  if (!v.is_tensor || *v.kind)
    throw Error(ErrorKind::kUnsupportedOp, std::string("graph ") + role + " '" + v.name + "' is a " +
                                               (*v.kind ? v.kind : "value of no tensor type") +
                                               "; only tensor, sequence and optional inputs and outputs are supported");
  if (v.elem_type == 0) return DType::kUndefined;
  const DType t = dtype_from_onnx(v.elem_type);
  if (t == DType::kUndefined)
    throw Error(ErrorKind::kDType, std::string("graph ") + role + " '" + v.name + "' has unsupported element type " +
                                       std::to_string(v.elem_type));
  return t;
}

void set_type(graph::Value& val, DType t, const ValueInfo& v) {
  if (!v.containers.empty()) {  // sequence/optional: no shape of its own
    val.dtype = v.containers[0];
    val.elem_type.assign(v.containers.begin() + 1, v.containers.end());
    if (t != DType::kUndefined) val.elem_type.push_back(t);
    else val.elem_type.clear();
    val.has_shape = false;
    val.shape.clear();
    return;
  }
  val.dtype = t;
  val.has_shape = v.has_shape;
  val.shape = v.shape;
}

}  // namespace

NodeInfo parse_node(wire::Reader r, ParseContext& ctx) {
  NodeInfo n;
  std::vector<wire::Reader> attrs;  // parsed once name and op_type are known
  while (r.next()) {
    switch (r.field()) {
      case 1: n.inputs.push_back(r.string("input")); break;
      case 2: n.outputs.push_back(r.string("output")); break;
      case 3: n.node.name = r.string("name"); break;
      case 4: n.node.op_type = r.string("op_type"); break;
      case 5: attrs.push_back(r.message("attribute", "AttributeProto")); break;
      case 7: n.node.domain = r.string("domain"); break;
      default: r.skip();
    }
  }
  if (n.node.domain == "ai.onnx") n.node.domain.clear();
  if (n.node.op_type.empty()) throw Error(ErrorKind::kModelFormat, "node has no op_type", n.node.name, "?");
  for (auto& ar : attrs) {
    try {
      std::string name;
      bool omitted = false;
      graph::Attribute a = parse_attribute(ar, ctx, &name, &omitted);
      if (omitted) continue;  // a function's reference the call leaves unset
      if (!n.node.attrs.emplace(name, std::move(a)).second)
        throw Error(ErrorKind::kModelFormat, "attribute '" + name + "' is given twice");
    } catch (const Error& e) {
      if (!e.node().empty() || !e.op().empty()) throw;  // already placed (an error in a subgraph)
      throw Error(e.kind(), e.what(), n.node.name, n.node.op_type);
    }
  }
  return n;
}

std::vector<DType> parse_type_proto(wire::Reader r, const std::string& what) {
  ValueInfo v;
  v.name = what;
  parse_type(r, v);
  const DType t = declared_dtype(v, "type");
  if (t == DType::kUndefined) throw Error(ErrorKind::kModelFormat, what + " names no element type");
  std::vector<DType> full = v.containers;
  full.push_back(t);
  return full;
}

std::string sparse_tensor_name(wire::Reader r) {
  while (r.next()) {
    if (r.field() != 1) {
      r.skip();
      continue;
    }
    wire::Reader values = r.message("values", "TensorProto");
    while (values.next()) {
      if (values.field() == 8) return values.string("name");
      values.skip();
    }
  }
  return "";
}

std::shared_ptr<graph::Graph> parse_graph(wire::Reader r, ParseContext& ctx, bool subgraph) {
  auto gp = std::make_shared<graph::Graph>();
  graph::Graph& g = *gp;
  std::vector<NodeInfo> nodes;
  std::vector<ValueInfo> inputs, outputs, hints;
  std::vector<std::pair<std::string, Tensor>> inits;
  while (r.next()) {
    switch (r.field()) {
      case 1: nodes.push_back(parse_node(r.message("node", "NodeProto"), ctx)); break;
      case 2: g.name = r.string("name"); break;
      case 5: {
        std::string name;
        Tensor t = parse_tensor(r.message("initializer", "TensorProto"), ctx, &name, "initializer #" + std::to_string(inits.size()));
        if (name.empty()) throw Error(ErrorKind::kModelFormat, "an initializer has no name");
        inits.emplace_back(std::move(name), std::move(t));
        break;
      }
      case 11: inputs.push_back(parse_value_info(r.message("input", "ValueInfoProto"))); break;
      case 12: outputs.push_back(parse_value_info(r.message("output", "ValueInfoProto"))); break;
      case 13: hints.push_back(parse_value_info(r.message("value_info", "ValueInfoProto"))); break;
      case 15:
        throw Error(ErrorKind::kUnsupportedOp,
                    "sparse initializer '" + sparse_tensor_name(r.message("sparse_initializer", "SparseTensorProto")) +
                        "': sparse initializers are not supported");
      default: r.skip();
    }
  }

  // Calls of the model's local functions become their bodies.
  expand_function_calls(nodes, ctx);

  // Constants first: a graph input that is also an initializer is a constant
  // (an overridable default in ONNX; folded in unless the engine is asked to
  // keep it an input: EngineOptions::override_initializers).
  for (auto& [name, t] : inits) {
    if (g.find_value(name) >= 0) throw Error(ErrorKind::kModelFormat, "initializer '" + name + "' is given twice");
    graph::Value& v = g.values[g.value_id(name)];
    v.dtype = t.dtype();
    v.has_shape = true;
    v.shape = sym_shape_from(t.shape());
    v.constant = std::move(t);
  }
  std::unordered_set<std::string> input_names;
  for (const auto& in : inputs) {
    if (in.name.empty()) throw Error(ErrorKind::kModelFormat, "a graph input has no name");
    if (!input_names.insert(in.name).second)
      throw Error(ErrorKind::kModelFormat, "graph input '" + in.name + "' is listed twice");
    const int id = g.value_id(in.name);
    if (g.values[id].is_constant()) {
      if (!subgraph) ctx.overridable.push_back(in.name);
      continue;
    }
    // A subgraph's inputs are typed from its node's inputs (Loop, Scan); the
    // model's own must say what they take.
    if (!subgraph && type_left_out(in))
      throw Error(ErrorKind::kModelFormat, "graph input '" + in.name + "' declares no type");
    set_type(g.values[id], declared_dtype(in, "input"), in);
    g.inputs.push_back(id);
  }

  // Names defined in this graph; anything else a node reads is outer scope.
  std::unordered_set<std::string> defined(input_names);
  for (const auto& [name, t] : inits) defined.insert(name);
  for (const auto& n : nodes)
    for (const auto& o : n.outputs)
      if (!o.empty()) {
        if (input_names.count(o))
          throw Error(ErrorKind::kModelFormat, "value '" + o + "' is both a graph input and a node output",
                      n.node.name, n.node.op_type);
        defined.insert(o);
      }

  for (auto& n : nodes) {
    for (const auto& in : n.inputs) {
      if (in.empty()) {
        n.node.inputs.push_back(-1);
        continue;
      }
      if (!subgraph && !defined.count(in))
        throw Error(ErrorKind::kModelFormat,
                    "input '" + in + "' is not a graph input, an initializer or any node's output",
                    n.node.name, n.node.op_type);
      n.node.inputs.push_back(g.value_id(in));
    }
    for (const auto& o : n.outputs) n.node.outputs.push_back(o.empty() ? -1 : g.value_id(o));
    g.add_node(std::move(n.node));
  }

  for (const auto& out : outputs) {
    if (out.name.empty()) throw Error(ErrorKind::kModelFormat, "a graph output has no name");
    if (!subgraph && !defined.count(out.name))
      throw Error(ErrorKind::kModelFormat, "graph output '" + out.name +
                                               "' is not produced by any node, input or initializer");
    const DType t = declared_dtype(out, "output");
    const int id = g.value_id(out.name);
    graph::Value& v = g.values[id];
    if (!v.is_constant() && !input_names.count(out.name) && !type_left_out(out)) set_type(v, t, out);
    g.outputs.push_back(id);
  }

  // value_info: shape/type hints for intermediate values; others are ignored.
  for (const auto& h : hints) {
    const int id = g.find_value(h.name);
    if (id < 0 || !h.is_tensor || !h.containers.empty()) continue;
    graph::Value& v = g.values[id];
    if (v.is_constant() || input_names.count(h.name) || v.dtype != DType::kUndefined || v.has_shape) continue;
    const DType t = dtype_from_onnx(h.elem_type);
    if (t == DType::kString) continue;
    set_type(v, t, h);
  }

  g.topo_sort();
  return gp;
}

}  // namespace twinfer::onnx::detail
