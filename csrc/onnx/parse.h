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

// AttributeProto -> Attribute; subgraphs are parsed recursively.
graph::Attribute parse_attribute(wire::Reader r, ParseContext& ctx, std::string* name);

// GraphProto -> Graph. A subgraph may refer to outer-scope names; the main
// graph may not.
std::shared_ptr<graph::Graph> parse_graph(wire::Reader r, ParseContext& ctx, bool subgraph);

// TypeProto -> the type, outermost first ({kSequence, kFloat32}); tensors,
// sequences and optionals only. `what` names it in errors.
std::vector<DType> parse_type_proto(wire::Reader r, const std::string& what);

// SparseTensorProto: only its name, for the "not supported" error.
std::string sparse_tensor_name(wire::Reader r);

}  // namespace twinfer::onnx::detail
