#include "onnx/functions.h"

#include <algorithm>
#include <set>
#include <utility>

namespace twinfer::onnx::detail {

namespace {

std::string key_of(const std::string& domain, const std::string& name) { return domain + "::" + name; }

// Calls nested deeper than this are refused (a function calling itself,
// directly or not, would expand forever).
constexpr int kMaxDepth = 32;
// Nodes all expansions together may make: a chain of functions each calling
// the next twice doubles per level (2^31 nodes from a 2 KB file).
constexpr size_t kMaxExpandedNodes = size_t(1) << 20;

void check_opsets(const FunctionDef& f, const std::map<std::string, int64_t>& model) {
  for (const auto& [domain, version] : f.opsets) {
    auto it = model.find(domain);
    if (it != model.end() && it->second != version)
      throw Error(ErrorKind::kUnsupportedOp,
                  "local function '" + f.name + "' imports " + (domain.empty() ? "ai.onnx" : domain) + " opset " +
                      std::to_string(version) + " but the model imports opset " + std::to_string(it->second) +
                      "; functions at another opset than their model are not supported");
  }
}

// The call's attributes, then the function's defaults for those it leaves out.
std::map<std::string, graph::Attribute> bound_attributes(const FunctionDef& f, const graph::Node& call,
                                                         ParseContext& ctx) {
  std::map<std::string, graph::Attribute> bound = call.attrs;
  for (const auto& r : f.attribute_defaults) {
    std::string name;
    graph::Attribute a = parse_attribute(r, ctx, &name);
    bound.emplace(name, std::move(a));  // the call's own wins
  }
  return bound;
}

bool has_subgraph(const graph::Node& n) {
  for (const auto& [name, a] : n.attrs)
    if (a.g || !a.graphs.empty()) return true;
  return false;
}

void expand_call(const NodeInfo& call, const FunctionDef& f, ParseContext& ctx, std::vector<NodeInfo>& out) {
  if (ctx.expand_depth >= kMaxDepth)
    throw Error(ErrorKind::kModelFormat, "local function calls nest deeper than " + std::to_string(kMaxDepth) +
                                             " (does '" + f.name + "' call itself?)",
                call.node.name, call.node.op_type);
  if (call.inputs.size() > f.inputs.size() || call.outputs.size() > f.outputs.size())
    throw Error(ErrorKind::kModelFormat,
                "calls local function '" + f.name + "' with " + std::to_string(call.inputs.size()) + " inputs and " +
                    std::to_string(call.outputs.size()) + " outputs; it takes " + std::to_string(f.inputs.size()) +
                    " and gives " + std::to_string(f.outputs.size()),
                call.node.name, call.node.op_type);
  if (ctx.model_opsets) check_opsets(f, *ctx.model_opsets);

  // Names inside the body are the function's own: each call renames them
  // apart, except the formal inputs and outputs, which become the call's.
  const std::string prefix = (call.node.name.empty() ? f.name : call.node.name) + "/" + f.name + "#" +
                             std::to_string(ctx.expansions++) + "/";
  std::map<std::string, std::string> rename;
  for (size_t i = 0; i < f.inputs.size(); ++i)
    rename[f.inputs[i]] = i < call.inputs.size() ? call.inputs[i] : std::string();  // absent: an omitted optional
  for (size_t i = 0; i < f.outputs.size(); ++i)
    rename[f.outputs[i]] = i < call.outputs.size() && !call.outputs[i].empty() ? call.outputs[i] : prefix + f.outputs[i];
  const auto renamed = [&](const std::string& name) {
    if (name.empty()) return name;
    auto it = rename.find(name);
    return it != rename.end() ? it->second : prefix + name;
  };

  const std::map<std::string, graph::Attribute> attrs = bound_attributes(f, call.node, ctx);
  const auto* outer_attrs = ctx.function_attrs;
  ctx.function_attrs = &attrs;
  ++ctx.expand_depth;
  try {
    std::vector<NodeInfo> body;
    for (const auto& r : f.nodes) {
      NodeInfo n = parse_node(r, ctx);
      // A subgraph would read the function's names from the outer scope, not
      // renamed: not supported rather than wrong.
      if (has_subgraph(n.node))
        throw Error(ErrorKind::kUnsupportedOp,
                    "local function '" + f.name + "' has a node with a subgraph (" + n.node.op_type +
                        "), which twinfer does not inline; inline the model's functions first "
                        "(onnx.inliner.inline_local_functions)",
                    call.node.name, call.node.op_type);
      for (auto& s : n.inputs) s = renamed(s);
      for (auto& s : n.outputs) s = renamed(s);
      // Unnamed stays unnamed (then known by its renamed first output), not
      // the prefix alone for every node of the call.
      if (!n.node.name.empty()) n.node.name = prefix + n.node.name;
      if (++ctx.expanded_nodes > kMaxExpandedNodes)
        throw Error(ErrorKind::kModelFormat, "local functions expand to more than " +
                                                 std::to_string(kMaxExpandedNodes) + " nodes",
                    call.node.name, call.node.op_type);
      body.push_back(std::move(n));
    }
    expand_function_calls(body, ctx);  // calls inside the body
    for (auto& n : body) out.push_back(std::move(n));
  } catch (...) {
    ctx.function_attrs = outer_attrs;
    --ctx.expand_depth;
    throw;
  }
  ctx.function_attrs = outer_attrs;
  --ctx.expand_depth;
}

}  // namespace

void register_function(wire::Reader r, ParseContext& ctx, std::map<std::string, int64_t>& model_opsets) {
  FunctionDef f;
  while (r.next()) {
    switch (r.field()) {
      case 1: f.name = r.string("name"); break;
      case 4: f.inputs.push_back(r.string("input")); break;
      case 5: f.outputs.push_back(r.string("output")); break;
      case 7: f.nodes.push_back(r.message("node", "NodeProto")); break;
      case 9: {
        wire::Reader o = r.message("opset_import", "OperatorSetIdProto");
        std::string domain;
        int64_t version = 0;
        while (o.next()) {
          if (o.field() == 1) domain = o.string("domain");
          else if (o.field() == 2) version = o.int64("version");
          else o.skip();
        }
        if (domain == "ai.onnx") domain.clear();
        f.opsets[domain] = version;
        break;
      }
      case 10: f.domain = r.string("domain"); break;
      case 11: f.attribute_defaults.push_back(r.message("attribute_proto", "AttributeProto")); break;
      case 13:
        if (!r.string("overload").empty())
          throw Error(ErrorKind::kUnsupportedOp, "local function overloads are not supported");
        break;
      default: r.skip();  // attribute (names without defaults), doc_string, value_info, metadata
    }
  }
  if (f.name.empty()) throw Error(ErrorKind::kModelFormat, "a local function has no name");
  for (const auto& out : f.outputs)
    if (std::find(f.inputs.begin(), f.inputs.end(), out) != f.inputs.end())
      throw Error(ErrorKind::kModelFormat, "local function '" + f.name + "' lists '" + out +
                                               "' as both an input and an output");
  if (f.domain == "ai.onnx") f.domain.clear();
  for (const auto& [domain, version] : f.opsets)
    if (version > 0) model_opsets.emplace(domain, version);  // a domain only its functions use
  const std::string key = key_of(f.domain, f.name);
  if (!ctx.functions.emplace(key, std::move(f)).second)
    throw Error(ErrorKind::kModelFormat, "local function '" + key + "' is defined twice");
}

void expand_function_calls(std::vector<NodeInfo>& nodes, ParseContext& ctx) {
  if (ctx.functions.empty()) return;
  bool any = false;
  for (const auto& n : nodes) any |= ctx.functions.count(key_of(n.node.domain, n.node.op_type)) > 0;
  if (!any) return;
  std::vector<NodeInfo> out;
  out.reserve(nodes.size());
  for (auto& n : nodes) {
    auto it = ctx.functions.find(key_of(n.node.domain, n.node.op_type));
    if (it == ctx.functions.end()) {
      out.push_back(std::move(n));
      continue;
    }
    expand_call(n, it->second, ctx, out);
  }
  nodes = std::move(out);
}

}  // namespace twinfer::onnx::detail
