#include "graph/passes/expand_flex_attention.h"

#include <cmath>
#include <string>
#include <vector>

#include "graph/domains.h"
#include "graph/passes/expand_contrib_util.h"
#include "graph/passes/splice_body.h"
#include "graph/subgraph.h"

namespace twinfer::passes {

namespace {

using contrib::Builder;
using contrib::input;

bool is_flex(const graph::Node& n) { return n.domain == kPreviewDomain && n.op_type == "FlexAttention"; }

bool is_float(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16 || t == DType::kFloat64;
}

// Dim `axis` of x as a 1-D tensor of one element (for a Concat of dims).
int dim_1d(Builder& b, int x, int64_t axis, const std::string& what) {
  const int shape = b.node("Shape", {x}, {b.value(what + "_shape")});
  return b.node("Gather", {shape, b.ints(what + "_axis", {axis})}, {b.value(what)});
}

// K or V [B, Hkv, L, D] repeated over each group of query heads: query head
// h reads K/V head h / (Hq / Hkv), so each K/V head is copied Hq / Hkv times
// in place: [B, Hkv, 1, L, D] -> [B, Hkv, Hq / Hkv, L, D] -> [B, Hq, L, D].
int repeat_heads(Builder& b, int x, int q, const std::string& what) {
  const int batch = dim_1d(b, q, 0, what + "_batch"), q_heads = dim_1d(b, q, 1, what + "_q_heads");
  const int heads = dim_1d(b, x, 1, what + "_heads"), len = dim_1d(b, x, 2, what + "_len");
  const int size = dim_1d(b, x, 3, what + "_size");
  const int repeat = b.node("Div", {q_heads, heads}, {b.value(what + "_repeat")});
  const int grouped = b.unsqueeze(x, {2}, what + "_grouped");
  const int wide = b.node("Concat", {batch, heads, repeat, len, size}, {b.value(what + "_wide_shape")},
                          {{"axis", int_attr(0)}});
  const int expanded = b.node("Expand", {grouped, wide}, {b.value(what + "_expanded")});
  const int shape = b.node("Concat", {batch, q_heads, len, size}, {b.value(what + "_shape")}, {{"axis", int_attr(0)}});
  return b.node("Reshape", {expanded, shape}, {b.value(what + "_repeated")});
}

// sqrt(scale) in Q's type, computed in float32 as ONNX's function body does:
// the attribute, or 1/sqrt(head size) from Q's shape (at run time if need be).
int root_scale(Builder& b, const graph::Graph& g, const graph::Node& n, int q, DType type) {
  const SymShape qs = g.values[q].shape;  // a copy: the constants added below grow g.values
  const bool static_size = g.values[q].has_shape && qs.size() == 4 && qs[3].known();
  if (n.has_attr("scale") || static_size) {
    const float scale = n.has_attr("scale") ? n.attr_float("scale", 1.f)
                                            : 1.f / std::sqrt(static_cast<float>(qs[3].value));
    return b.scalar_of("root_scale", std::sqrt(scale), type);
  }
  const int size = b.node("Cast", {b.dim(q, 3, "head_size")}, {b.value("head_size_f")},
                          {{"to", int_attr(dtype_to_onnx(DType::kFloat32))}});
  const int inv = b.node("Div", {b.scalar_float("one", 1.f), b.node("Sqrt", {size}, {b.value("root_size")})},
                         {b.value("scale")});
  const int root = b.node("Sqrt", {inv}, {b.value("root_scale_f")});
  if (type == DType::kFloat32) return root;
  return b.node("Cast", {root}, {b.value("root_scale")}, {{"to", int_attr(dtype_to_onnx(type))}});
}

int cast_to(Builder& b, int x, DType from, DType to, const std::string& what) {
  if (from == to) return x;
  return b.node("Cast", {x}, {b.value(what)}, {{"to", int_attr(dtype_to_onnx(to))}});
}

// A modifier subgraph spliced in with `x` as its input; -1 where it reads a
// name nothing binds.
int modify(graph::Graph& g, const graph::Node& n, const char* attr, int x, std::vector<graph::Node>& added) {
  const graph::Attribute* a = n.attr(attr);
  if (!a || !a->g) return x;
  if (a->g->inputs.size() != 1 || a->g->outputs.size() != 1) return -1;
  const std::string prefix = (n.name.empty() ? std::string("flex_attention") : n.name) + "/" + attr;
  const std::vector<int> outs = splice_body(g, *a->g, prefix, {x}, graph::captured_inputs(n), &added);
  return outs.empty() ? -1 : outs[0];
}

bool expand_one(graph::Graph& g, const graph::Node& n, int64_t opset, std::vector<graph::Node>& added) {
  const int q = input(n, 0), k = input(n, 1), v = input(n, 2);
  if (q < 0 || k < 0 || v < 0 || n.outputs.empty() || n.outputs[0] < 0) return false;
  const DType type = g.values[q].dtype;
  if (!is_float(type)) return false;
  const DType precision =
      n.has_attr("softmax_precision")
          ? dtype_from_onnx(static_cast<int32_t>(n.attr_int("softmax_precision", 1)))
          : (type == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32);
  if (precision != DType::kFloat32 && precision != DType::kFloat64) return false;  // the kernel says why
  for (int x : {q, k, v})
    if (g.values[x].has_shape && g.values[x].shape.size() != 4) return false;

  Builder b(g, n, added, opset);
  const bool same_heads = g.values[q].has_shape && g.values[k].has_shape &&
                          g.values[q].shape[1] == g.values[k].shape[1];
  const int keys = same_heads ? k : repeat_heads(b, k, q, "k");
  const int values = same_heads ? v : repeat_heads(b, v, q, "v");
  const int root = root_scale(b, g, n, q, type);
  const int qs = b.node("Mul", {q, root}, {b.value("q_scaled")});
  // Transposed, then scaled: the form the attention fusion knows (fuse_attention.h).
  const int kt = b.node("Transpose", {keys}, {b.value("k_transposed")}, {{"perm", ints_attr({0, 1, 3, 2})}});
  const int ks = b.node("Mul", {kt, root}, {b.value("k_scaled")});
  const int scores = b.node("MatMul", {qs, ks}, {b.value("scores")});
  const int modified = modify(g, n, "score_mod", cast_to(b, scores, type, precision, "scores_wide"), added);
  if (modified < 0) return false;
  const int probs = modify(g, n, "prob_mod", b.node("Softmax", {modified}, {b.value("probs")}, {{"axis", int_attr(3)}}),
                           added);
  if (probs < 0) return false;
  const int vw = cast_to(b, values, type, precision, "v_wide");
  if (precision == type) {
    b.node("MatMul", {probs, vw}, {n.outputs[0]});
  } else {
    b.node("Cast", {b.node("MatMul", {probs, vw}, {b.value("y_wide")})}, {n.outputs[0]},
           {{"to", int_attr(dtype_to_onnx(type))}});
  }
  return true;
}

}  // namespace

bool has_flex_attention(const graph::Graph& g) {
  for (const auto& n : g.nodes)
    if (is_flex(n)) return true;
  return false;
}

int expand_flex_attention(graph::Graph& g, const PassContext& pc) {
  const int count = rewrite_each_node(g, [&](size_t i, std::vector<graph::Node>& added) {
    if (!is_flex(g.nodes[i])) return false;
    const graph::Node n = g.nodes[i];  // a copy: the expansion adds to g
    return expand_one(g, n, pc.opset, added);
  });
  if (count)
    pc.note("expand_flex_attention: " + std::to_string(count) + " FlexAttention node(s) as MatMul, Softmax, MatMul");
  return count;
}

}  // namespace twinfer::passes
