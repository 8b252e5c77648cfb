#include "graph/passes/string_labels.h"

#include <numeric>

#include "graph/passes/rewrite_util.h"

namespace twinfer::passes {

namespace {

// The attribute a classifier's int64 labels go in, or null for other nodes.
const char* int_labels_attr(const graph::Node& n) {
  if (n.domain != "ai.onnx.ml") return nullptr;
  if (n.op_type == "TreeEnsembleClassifier") return "classlabels_int64s";
  if (n.op_type == "SVMClassifier" || n.op_type == "LinearClassifier") return "classlabels_ints";
  return nullptr;
}

}  // namespace

int string_labels_as_indices(graph::Graph& g, const PassContext&) {
  return rewrite_each_node(g, [&](size_t i, std::vector<graph::Node>& added) {
    const graph::Node& n = g.nodes[i];
    const char* ints = int_labels_attr(n);
    const graph::Attribute* labels = n.attr("classlabels_strings");
    if (!ints || !labels || labels->type != graph::Attribute::Type::kStrings || labels->strings.empty() ||
        n.has_attr(ints) || n.outputs.empty() || n.outputs[0] < 0)
      return false;
    const int64_t classes = static_cast<int64_t>(labels->strings.size());
    graph::Node indices = n;
    std::vector<int64_t> ids(static_cast<size_t>(classes));
    std::iota(ids.begin(), ids.end(), int64_t{0});
    indices.attrs.erase("classlabels_strings");
    indices.attrs[ints] = ints_attr(std::move(ids));
    const int label = n.outputs[0];
    const std::string base = g.values[static_cast<size_t>(label)].name;
    const int index = add_value(g, base + "/class_index");
    g.values[static_cast<size_t>(index)].dtype = DType::kInt64;
    indices.outputs[0] = index;
    // The strings by LabelEncoder (its ai.onnx.ml 1 form, index -> string)
    // rather than a Gather of a string constant: attributes go into saved
    // engines, string tensors do not.
    graph::Node encode;
    encode.name = n.name + "/labels";
    encode.op_type = "LabelEncoder";
    encode.domain = "ai.onnx.ml";
    encode.inputs = {index};
    encode.outputs = {label};
    graph::Attribute names;
    names.type = graph::Attribute::Type::kStrings;
    names.strings = labels->strings;
    encode.attrs["classes_strings"] = std::move(names);
    added.push_back(std::move(indices));
    added.push_back(std::move(encode));
    return true;
  });
}

}  // namespace twinfer::passes
