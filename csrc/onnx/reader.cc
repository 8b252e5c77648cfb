// ModelProto -> graph::Model: the entry points of the ONNX reader.
#include "onnx/reader.h"

#include "onnx/file_snapshot.h"
#include "onnx/functions.h"
#include "onnx/parse.h"

namespace twinfer::onnx {

namespace {

using detail::ParseContext;

// Opset versions of the default domain the reader accepts; which ops run is
// decided later, per op.
constexpr int64_t kMaxDefaultOpset = 28;

void parse_opset(wire::Reader r, graph::Model& m) {
  std::string domain;
  int64_t version = 0;
  bool has_version = false;
  while (r.next()) {
    switch (r.field()) {
      case 1: domain = r.string("domain"); break;
      case 2: version = r.int64("version"); has_version = true; break;
      default: r.skip();
    }
  }
  if (domain == "ai.onnx") domain.clear();
  const std::string label = domain.empty() ? "ai.onnx" : domain;
  if (!has_version || version <= 0)
    throw Error(ErrorKind::kModelFormat, "opset_import for domain '" + label + "' has no valid version");
  auto [it, fresh] = m.opsets.emplace(domain, version);
  if (!fresh && it->second != version)
    throw Error(ErrorKind::kModelFormat, "opset_import lists domain '" + label + "' twice, with versions " +
                                             std::to_string(it->second) + " and " + std::to_string(version));
}

graph::Model parse_model(const void* data, size_t size, ParseContext& ctx) {
  graph::Model m;
  wire::Reader r(wire::Span{static_cast<const uint8_t*>(data), size}, "ModelProto");
  wire::Reader graph_reader;
  bool has_graph = false;
  std::vector<wire::Reader> functions;  // registered once the model's opsets are known
  while (r.next()) {
    switch (r.field()) {
      case 1: m.ir_version = r.int64("ir_version"); break;
      case 2: m.producer_name = r.string("producer_name"); break;
      case 7:
        graph_reader = r.message("graph", "GraphProto");
        has_graph = true;
        break;
      case 8: parse_opset(r.message("opset_import", "OperatorSetIdProto"), m); break;
      case 25: functions.push_back(r.message("functions", "FunctionProto")); break;  // onnx/functions.h
      default: r.skip();  // metadata
    }
  }
  if (!has_graph) throw Error(ErrorKind::kModelFormat, "the model has no graph (is this an ONNX file?)");
  // A model may import only other domains (an ai.onnx.ml-only model, as the
  // ONNX suite has); the engine refuses it if a node of the default domain
  // turns up anyway.
  for (auto& f : functions) detail::register_function(f, ctx, m.opsets);
  const int64_t opset = m.opset("");
  if (opset > kMaxDefaultOpset)
    throw Error(ErrorKind::kUnsupportedOp, "ONNX opset " + std::to_string(opset) +
                                               " is newer than this reader knows (1.." +
                                               std::to_string(kMaxDefaultOpset) + ")");
  ctx.model_opsets = &m.opsets;
  m.graph = std::move(*detail::parse_graph(graph_reader, ctx, /*subgraph=*/false));
  ctx.model_opsets = nullptr;
  m.weight_bytes_mapped = ctx.bytes_mapped;
  m.weight_bytes_copied = ctx.bytes_copied;
  m.overridable_initializers = std::move(ctx.overridable);
  // Borrowed tensors hold their own keep-alive; when nothing was borrowed,
  // dropping the mapping here lets the file's pages go.
  if (ctx.bytes_mapped) m.backing = ctx.keep_alive;
  return m;
}

std::string folder_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

graph::Model read_model_file(const std::string& path) {
  std::shared_ptr<FileSnapshot> file = FileSnapshot::open(path);
  ParseContext ctx;
  ctx.keep_alive = file;
  ctx.base_dir = folder_of(path);
  return parse_model(file->data(), file->size(), ctx);
}

graph::Model read_model_bytes(const void* data, size_t size, std::shared_ptr<void> keep_alive,
                              const std::string& base_dir) {
  if (!data && size) throw Error(ErrorKind::kInvalidArgument, "model bytes: null pointer");
  ParseContext ctx;
  ctx.keep_alive = std::move(keep_alive);
  ctx.base_dir = base_dir;
  return parse_model(data, size, ctx);
}

}  // namespace twinfer::onnx
