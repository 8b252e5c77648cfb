// AttributeProto -> graph::Attribute, subgraphs (If/Loop/Scan bodies) included.
#include "onnx/parse.h"

namespace twinfer::onnx::detail {

namespace {

using Type = graph::Attribute::Type;

// AttributeProto.AttributeType codes.
enum : int32_t {
  kUndefined = 0, kFloat = 1, kInt = 2, kString = 3, kTensor = 4, kGraph = 5, kFloats = 6, kInts = 7,
  kStrings = 8, kTensors = 9, kGraphs = 10, kSparseTensor = 11, kSparseTensors = 12, kTypeProto = 13,
  kTypeProtos = 14,
};

// Older models leave `type` out; the field that is set tells it then.
int32_t infer_type(const bool seen[24]) {
  static const std::pair<int, int32_t> by_field[] = {
      {2, kFloat}, {3, kInt}, {4, kString}, {5, kTensor}, {6, kGraph}, {22, kSparseTensor},
      {14, kTypeProto}, {7, kFloats}, {8, kInts}, {9, kStrings}, {10, kTensors}, {11, kGraphs},
      {23, kSparseTensors}, {15, kTypeProtos}};
  for (const auto& [field, type] : by_field)
    if (seen[field]) return type;
  return kUndefined;
}

}  // namespace

graph::Attribute parse_attribute(wire::Reader r, ParseContext& ctx, std::string* name_out, bool* omitted) {
  graph::Attribute a;
  std::string name, ref_attr_name;
  int32_t type = kUndefined;
  bool seen[24] = {};
  // Tensors and graphs wait until the name is known, so their errors can name it.
  std::vector<wire::Reader> tensors, graphs, types;
  while (r.next()) {
    const uint32_t f = r.field();
    if (f < 24) seen[f] = true;
    switch (f) {
      case 1: name = r.string("name"); break;
      case 2: a.f = r.float32("f"); break;
      case 3: a.i = r.int64("i"); break;
      case 4: a.s = r.byte_string("s"); break;
      case 5: tensors.assign(1, r.message("t", "TensorProto")); break;
      case 6: graphs.assign(1, r.message("g", "GraphProto")); break;
      case 7: r.append_floats("floats", a.floats); break;
      case 8: r.append_varints("ints", a.ints); break;
      case 9: a.strings.push_back(r.byte_string("strings")); break;
      case 10: tensors.push_back(r.message("tensors", "TensorProto")); break;
      case 11: graphs.push_back(r.message("graphs", "GraphProto")); break;
      case 14: types.assign(1, r.message("tp", "TypeProto")); break;
      case 20: type = r.int32("type"); break;
      case 21: ref_attr_name = r.string("ref_attr_name"); break;
      default: r.skip();  // doc_string, sparse tensors, lists of type protos (refused below)
    }
  }
  if (name_out) *name_out = name;
  if (name.empty()) throw Error(ErrorKind::kModelFormat, "an attribute has no name");
  const std::string what = "attribute '" + name + "'";
  if (!ref_attr_name.empty()) {
    if (!ctx.function_attrs || !omitted)
      throw Error(ErrorKind::kModelFormat, what + " refers to function attribute '" + ref_attr_name +
                                               "' (ref_attr_name), which is only valid inside a function");
    auto it = ctx.function_attrs->find(ref_attr_name);
    if (it == ctx.function_attrs->end()) {
      *omitted = true;  // neither the call nor the function gives it
      return a;
    }
    return it->second;
  }
  if (type == kUndefined) type = infer_type(seen);

  switch (type) {
    case kFloat: a.type = Type::kFloat; break;
    case kInt: a.type = Type::kInt; break;
    case kString: a.type = Type::kString; break;
    case kFloats: a.type = Type::kFloats; break;
    case kInts: a.type = Type::kInts; break;
    case kStrings: a.type = Type::kStrings; break;
    case kTensor:
      if (tensors.size() != 1) throw Error(ErrorKind::kModelFormat, what + " of type TENSOR has no tensor");
      a.type = Type::kTensor;
      a.t = parse_tensor(tensors[0], ctx, nullptr, what);
      break;
    case kTensors:
      a.type = Type::kTensors;
      for (size_t k = 0; k < tensors.size(); ++k)
        a.tensors.push_back(parse_tensor(tensors[k], ctx, nullptr, what + "[" + std::to_string(k) + "]"));
      break;
    case kGraph:
      if (graphs.size() != 1) throw Error(ErrorKind::kModelFormat, what + " of type GRAPH has no graph");
      a.type = Type::kGraph;
      a.g = parse_graph(graphs[0], ctx, /*subgraph=*/true);
      break;
    case kGraphs:
      a.type = Type::kGraphs;
      for (auto& g : graphs) a.graphs.push_back(parse_graph(g, ctx, /*subgraph=*/true));
      break;
    case kSparseTensor:
    case kSparseTensors:
      throw Error(ErrorKind::kUnsupportedOp, what + ": sparse tensor attributes are not supported");
    case kTypeProto:  // Optional's `type`
      if (types.size() != 1) throw Error(ErrorKind::kModelFormat, what + " of type TYPE_PROTO has no type");
      a.type = Type::kTypeProto;
      a.type_proto = parse_type_proto(types[0], what);
      break;
    case kTypeProtos:
      throw Error(ErrorKind::kUnsupportedOp, what + ": lists of type protos are not supported");
    case kUndefined:
      throw Error(ErrorKind::kModelFormat, what + " has no value");
    default:
      throw Error(ErrorKind::kModelFormat, what + " has unknown type " + std::to_string(type));
  }
  return a;
}

}  // namespace twinfer::onnx::detail
