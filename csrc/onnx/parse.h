// Internal to the ONNX reader: the state shared by the message parsers
// (tensor_proto.cc, external_data.cc, attribute.cc, graph_proto.cc, reader.cc).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "onnx/file_snapshot.h"
#include "onnx/wire.h"

namespace twinfer::onnx::detail {

// A model-local function (ModelProto.functions): nodes of its domain and
// name call it, and each call is expanded in place (onnx/functions.cc). Its
// messages are kept unparsed: a body is parsed once per call, with that
// call's attributes.
struct FunctionDef {
  std::string domain, name;
  std::vector<std::string> inputs, outputs;
  std::vector<wire::Reader> nodes;               // NodeProto
  std::vector<wire::Reader> attribute_defaults;  // AttributeProto (attribute_proto)
  std::map<std::string, int64_t> opsets;         // its opset_import ("" = ai.onnx)
};

struct ParseContext {
  std::shared_ptr<void> keep_alive;  // owner of the model bytes
  std::string base_dir;              // folder of external data; "" = none allowed
  std::string base_real;             // realpath of base_dir, resolved on first use
  std::map<std::string, std::shared_ptr<FileSnapshot>> external_files;  // by real path
  size_t bytes_mapped = 0;           // initializer bytes borrowed in place
  size_t bytes_copied = 0;           // initializer bytes copied (unaligned / typed fields)
  // The main graph's initializers that its inputs also list (IR >= 4: an
  // overridable default), in input order.
  std::vector<std::string> overridable;
  // The model's local functions by "domain::name" (onnx/functions.h); while
  // a call is expanded, the attributes its body's references resolve to.
  std::map<std::string, FunctionDef> functions;
  const std::map<std::string, graph::Attribute>* function_attrs = nullptr;
  const std::map<std::string, int64_t>* model_opsets = nullptr;  // the model's opset_import
  int expansions = 0;      // calls expanded so far: their value names' prefix
  int expand_depth = 0;    // nested calls now being expanded
  size_t expanded_nodes = 0;  // nodes all expansions have made (capped: onnx/functions.cc)
};

// TensorProto -> host Tensor. `name` receives the tensor's name; `fallback`
// names it in errors when it has none (e.g. "attribute 'value'").
Tensor parse_tensor(wire::Reader r, ParseContext& ctx, std::string* name, const std::string& fallback);

// The bytes [offset, offset+length) of an external data file, checked to
// stay inside the model's folder and the file; `owner` keeps the mapping alive.
struct ExternalRef {
  std::string location;
  int64_t offset = 0;
  int64_t length = -1;  // -1: not given
};
wire::Span external_bytes(ParseContext& ctx, const ExternalRef& ref, const std::string& tensor,
                          size_t expected_bytes, std::shared_ptr<void>* owner);

// AttributeProto -> Attribute; subgraphs are parsed recursively. Inside a
// function's body (ctx.function_attrs set) an attribute may refer to one of
// the call's (ref_attr_name): its value is taken, and where the call gives
// none and the function has no default, *omitted is set (the attribute is
// left out, as ONNX says).
graph::Attribute parse_attribute(wire::Reader r, ParseContext& ctx, std::string* name, bool* omitted = nullptr);

// NodeProto, its inputs and outputs still by name.
struct NodeInfo {
  graph::Node node;
  std::vector<std::string> inputs, outputs;
};
NodeInfo parse_node(wire::Reader r, ParseContext& ctx);

// GraphProto -> Graph. A subgraph may refer to outer-scope names; the main
// graph may not.
std::shared_ptr<graph::Graph> parse_graph(wire::Reader r, ParseContext& ctx, bool subgraph);

// TypeProto -> the type, outermost first ({kSequence, kFloat32}); tensors,
// sequences and optionals only. `what` names it in errors.
std::vector<DType> parse_type_proto(wire::Reader r, const std::string& what);

// SparseTensorProto: only its name, for the "not supported" error.
std::string sparse_tensor_name(wire::Reader r);

}  // namespace twinfer::onnx::detail
