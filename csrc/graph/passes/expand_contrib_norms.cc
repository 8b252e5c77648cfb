#include "graph/passes/expand_contrib_norms.h"

#include <map>
#include <string>

#include "graph/passes/expand_contrib_util.h"

namespace twinfer::passes {

namespace {

using namespace contrib;

void refuse_output(const Node& n, size_t i, const std::string& what) {
  if (output(n, i) >= 0)
    throw Error(ErrorKind::kUnsupportedOp, n.op_type + "'s " + what + " output is not supported", n.name, n.op_type);
}

// x + skip [+ bias], written into `sum_out` when a reader wants the sum.
int skip_sum(Builder& b, const Node& n, int sum_out) {
  const int bias = input(n, n.op_type == "SkipLayerNormalization" ? 4 : 3);
  const int sum = b.node("Add", {input(n, 0), input(n, 1)}, {bias < 0 && sum_out >= 0 ? sum_out : b.value("sum")});
  if (bias < 0) return sum;
  return b.node("Add", {sum, bias}, {sum_out >= 0 ? sum_out : b.value("biased")});
}

bool expand_skip_layer_norm(Graph& g, const Node& n, std::vector<Node>& out) {
  if (!is_contrib(n, "SkipLayerNormalization")) return false;
  Builder b(g, n, out);
  // The sum is an output of its own (index 3) when a reader wants it.
  const int sum = skip_sum(b, n, output(n, 3));
  std::map<std::string, Attribute> attrs{{"axis", int_attr(-1)}, {"epsilon", float_attr(n.attr_float("epsilon", 1e-12f))}};
  std::vector<int> outs{output(n, 0), output(n, 1), output(n, 2)};
  while (outs.size() > 1 && outs.back() < 0) outs.pop_back();
  b.node("LayerNormalization", {sum, input(n, 2), input(n, 3)}, outs, attrs);
  return true;
}

bool expand_skip_simplified_layer_norm(Graph& g, const Node& n, std::vector<Node>& out) {
  if (!is_contrib(n, "SkipSimplifiedLayerNormalization")) return false;
  refuse_output(n, 1, "mean");
  refuse_output(n, 2, "inv_std_var");
  Builder b(g, n, out);
  const int sum = skip_sum(b, n, output(n, 3));
  b.node("RMSNormalization", {sum, input(n, 2)}, {output(n, 0)},
         {{"axis", int_attr(-1)}, {"epsilon", float_attr(n.attr_float("epsilon", 1e-12f))}});
  return true;
}

bool expand_simplified_layer_norm(Graph& g, const Node& n, std::vector<Node>& out) {
  if (n.op_type != "SimplifiedLayerNormalization" ||
      !(n.domain.empty() || n.domain == "ai.onnx" || n.domain == contrib::kDomain))
    return false;
  refuse_output(n, 1, "inv_std_var");
  Builder b(g, n, out);
  b.node("RMSNormalization", {input(n, 0), input(n, 1)}, {output(n, 0)},
         {{"axis", int_attr(n.attr_int("axis", -1))},
          {"epsilon", float_attr(n.attr_float("epsilon", 1e-5f))},
          {"stash_type", int_attr(n.attr_int("stash_type", 1))}});
  return true;
}

bool expand_embed_layer_norm(Graph& g, const Node& n, std::vector<Node>& out, int64_t opset) {
  if (!is_contrib(n, "EmbedLayerNormalization")) return false;
  Builder b(g, n, out, opset);
  const int ids = input(n, 0), segments = input(n, 1), mask = input(n, 7), position_ids = input(n, 8);
  int sum = b.node("Gather", {input(n, 2), ids}, {b.value("words")});
  int positions = position_ids;
  if (positions < 0) {
    if (opset < 11)
      throw Error(ErrorKind::kUnsupportedOp,
                  "EmbedLayerNormalization without position_ids in a model of opset " + std::to_string(opset) +
                      " (before 11) is not supported",
                  n.name, n.op_type);
    positions = b.node("Range", {b.scalar_int("range_start", 0), b.dim(ids, 1, "seq"), b.scalar_int("range_step", 1)},
                       {b.value("positions")});
  }
  sum = b.node("Add", {sum, b.node("Gather", {input(n, 3), positions}, {b.value("position_rows")})},
               {b.value("words_positions")});
  if (segments >= 0 && input(n, 4) >= 0)
    sum = b.node("Add", {sum, b.node("Gather", {input(n, 4), segments}, {b.value("segment_rows")})},
                 {b.value("with_segments")});
  if (output(n, 2) >= 0) sum = b.node("Identity", {sum}, {output(n, 2)});
  b.node("LayerNormalization", {sum, input(n, 5), input(n, 6)}, {output(n, 0)},
         {{"axis", int_attr(-1)}, {"epsilon", float_attr(n.attr_float("epsilon", 1e-12f))}});
  const int mask_index = output(n, 1);
  if (mask_index < 0) return true;
  // Each row's count of entries equal to 1; zeros when there is no mask.
  // Counted in float32 (exact below 2^24), which device reductions take.
  const int int64 = static_cast<int>(dtype_to_onnx(DType::kInt64));
  const int float32 = static_cast<int>(dtype_to_onnx(DType::kFloat32));
  const int like = mask >= 0 ? mask : ids;
  const int wide = b.node("Cast", {like}, {b.value("mask_int64")}, {{"to", int_attr(int64)}});
  const int ones = mask >= 0 ? b.node("Cast", {b.node("Equal", {wide, b.scalar_int("one", 1)}, {b.value("is_one")})},
                                      {b.value("ones")}, {{"to", int_attr(float32)}})
                             : b.node("Mul", {b.node("Cast", {wide}, {b.value("as_float")}, {{"to", int_attr(float32)}}),
                                              b.scalar_float("zero", 0.f)},
                                      {b.value("zeros")});
  const int counts = b.reduce("ReduceSum", ones, {1}, false, "mask_counts");
  b.node("Cast", {counts}, {mask_index}, {{"to", int_attr(dtype_to_onnx(DType::kInt32))}});
  return true;
}

}  // namespace

bool expand_norm_contrib(Graph& g, const Node& n, std::vector<Node>& out, int64_t opset) {
  return expand_skip_layer_norm(g, n, out) || expand_skip_simplified_layer_norm(g, n, out) ||
         expand_simplified_layer_norm(g, n, out) || expand_embed_layer_norm(g, n, out, opset);
}

}  // namespace twinfer::passes
