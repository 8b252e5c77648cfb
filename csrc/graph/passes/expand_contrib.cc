#include "graph/passes/expand_contrib.h"

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "graph/passes/expand_contrib_attention.h"
#include "graph/passes/expand_contrib_nbits.h"
#include "graph/passes/expand_contrib_norms.h"
#include "graph/passes/expand_contrib_quant.h"
#include "graph/passes/expand_contrib_util.h"
#include "ops/rnn/rnn_spec.h"

namespace twinfer::passes {

namespace {

using namespace contrib;

bool expand_gelu(Graph& g, const Node& n, std::vector<Node>& out, int64_t) {
  const bool fast = is_contrib(n, "FastGelu");
  if (!fast && !is_contrib(n, "Gelu") && !is_contrib(n, "BiasGelu")) return false;
  Builder b{g, n, out};
  const int x = b.plus(input(n, 0), input(n, 1), "biased");
  std::map<std::string, Attribute> attrs;
  if (fast) attrs["approximate"] = string_attr("tanh");
  b.node("Gelu", {x}, {output(n, 0)}, attrs);
  return true;
}

// x * sigmoid(alpha * x)
bool expand_quick_gelu(Graph& g, const Node& n, std::vector<Node>& out, int64_t opset) {
  if (!is_contrib(n, "QuickGelu")) return false;
  Builder b(g, n, out);
  const float alpha = n.attr_float("alpha", 1.702f);
  int scaled = input(n, 0);
  if (alpha != 1.f) {
    // alpha in x's type: a float32 one would make an fp16 model's Mul float32.
    const DType type = upstream_values(g, out, opset, {scaled})[0].dtype;
    scaled = b.node("Mul", {scaled, b.scalar_of("alpha", alpha, type)}, {b.value("scaled")});
  }
  b.node("Mul", {input(n, 0), b.node("Sigmoid", {scaled}, {b.value("gate")})}, {output(n, 0)});
  return true;
}

// x + bias + skip
bool expand_bias_add(Graph& g, const Node& n, std::vector<Node>& out, int64_t) {
  if (!is_contrib(n, "BiasAdd")) return false;
  Builder b(g, n, out);
  b.node("Add", {b.plus(input(n, 0), input(n, 1), "biased"), input(n, 2)}, {output(n, 0)});
  return true;
}

// (x + bias) split in two halves along the last axis: left * Gelu(right).
bool expand_bias_split_gelu(Graph& g, const Node& n, std::vector<Node>& out, int64_t opset) {
  if (!is_contrib(n, "BiasSplitGelu")) return false;
  Builder b(g, n, out, opset);
  const int left = b.value("left"), right = b.value("right");
  b.split(b.plus(input(n, 0), input(n, 1), "biased"), -1, {}, {left, right});
  b.node("Mul", {left, b.node("Gelu", {right}, {b.value("gelu")})}, {output(n, 0)});
  return true;
}

// FastGelu(x @ W [+ bias])
bool expand_gemm_fast_gelu(Graph& g, const Node& n, std::vector<Node>& out, int64_t) {
  if (!is_contrib(n, "GemmFastGelu")) return false;
  Builder b(g, n, out);
  const int y = b.plus(b.node("MatMul", {input(n, 0), input(n, 1)}, {b.value("product")}), input(n, 2), "biased");
  b.node("Gelu", {y}, {output(n, 0)}, {{"approximate", string_attr("tanh")}});
  return true;
}

bool expand_fused_matmul(Graph& g, const Node& n, std::vector<Node>& out, int64_t) {
  if (!is_contrib(n, "FusedMatMul")) return false;
  if (n.attr_int("transBatchA", 0) || n.attr_int("transBatchB", 0)) return false;
  const bool ta = n.attr_int("transA", 0) != 0, tb = n.attr_int("transB", 0) != 0;
  const float alpha = n.attr_float("alpha", 1.f);
  Builder b{g, n, out};
  const int y = alpha == 1.f ? output(n, 0) : b.value("product");
  if (!ta && !tb) {
    b.node("MatMul", {input(n, 0), input(n, 1)}, {y});
  } else {
    // Einsum transposes the last two dims whatever the rank, which is not
    // known before shape inference.
    const std::string eq = std::string(ta ? "...ji" : "...ij") + "," + (tb ? "...kj" : "...jk") + "->...ik";
    b.node("Einsum", {input(n, 0), input(n, 1)}, {y}, {{"equation", string_attr(eq)}});
  }
  if (alpha != 1.f) {
    Tensor a = Tensor::empty(DType::kFloat32, {});
    *a.data_as<float>() = alpha;
    b.node("Mul", {y, b.constant("alpha", std::move(a))}, {output(n, 0)});
  }
  return true;
}

// W_q [dirs, rows, 4H] (int8/uint8) with scale/zero [dirs] or [dirs, 4H]
// -> float W [dirs, 4H, rows], the layout the ONNX LSTM takes.
bool dequantize_transposed(const Graph& g, int q, int scale, int zero, Tensor* w) {
  if (q < 0 || scale < 0 || !g.values[q].is_constant() || !g.values[scale].is_constant()) return false;
  const Tensor& qt = g.values[q].constant;
  const Tensor& st = g.values[scale].constant;
  const Tensor* zt = zero >= 0 && g.values[zero].is_constant() ? &g.values[zero].constant : nullptr;
  if (zero >= 0 && !zt) return false;
  if (qt.shape().size() != 3 || (qt.dtype() != DType::kInt8 && qt.dtype() != DType::kUInt8) ||
      st.dtype() != DType::kFloat32)
    return false;
  const int64_t dirs = qt.shape()[0], rows = qt.shape()[1], cols = qt.shape()[2];
  const bool per_column = st.numel() == dirs * cols;
  if (!per_column && st.numel() != dirs) return false;
  if (zt && (zt->numel() != st.numel() || zt->dtype() != qt.dtype())) return false;
  *w = Tensor::empty(DType::kFloat32, {dirs, cols, rows});
  float* dst = w->data_as<float>();
  for (int64_t d = 0; d < dirs; ++d)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t k = d * rows * cols + r * cols + c;
        const int64_t s = per_column ? d * cols + c : d;
        const double qv = qt.dtype() == DType::kInt8 ? qt.data_as<int8_t>()[k] : qt.data_as<uint8_t>()[k];
        const double zv = !zt ? 0.0 : zt->dtype() == DType::kInt8 ? zt->data_as<int8_t>()[s] : zt->data_as<uint8_t>()[s];
        dst[(d * cols + c) * rows + r] = static_cast<float>((qv - zv) * st.data_as<float>()[s]);
      }
  return true;
}

// W's or R's scales per gate column [dirs * 4H] where it is int8 with zero
// points 0 (onnxruntime's quantizer writes them so): the float W or R is then
// exactly q * scale, and the CPU LSTM can run its products on q as the
// contrib op does, X and h quantized to uint8 (backends/cpu/onednn_rnn.cc).
bool int8_gate_scales(const Graph& g, int q, int scale, int zero, std::vector<float>* out) {
  const Tensor& qt = g.values[q].constant;
  const Tensor& st = g.values[scale].constant;
  if (qt.dtype() != DType::kInt8) return false;
  if (zero >= 0) {
    const Tensor& zt = g.values[zero].constant;
    const int8_t* z = zt.data_as<int8_t>();
    if (std::any_of(z, z + zt.numel(), [](int8_t v) { return v != 0; })) return false;
  }
  const int64_t dirs = qt.shape()[0], cols = qt.shape()[2];
  const bool per_column = st.numel() == dirs * cols;
  out->resize(static_cast<size_t>(dirs * cols));
  for (int64_t d = 0; d < dirs; ++d)
    for (int64_t c = 0; c < cols; ++c) (*out)[d * cols + c] = st.data_as<float>()[per_column ? d * cols + c : d];
  return true;
}

bool expand_quantized_lstm(Graph& g, const Node& n, std::vector<Node>& out, int64_t) {
  if (!is_contrib(n, "DynamicQuantizeLSTM")) return false;
  Tensor w, r;
  if (!dequantize_transposed(g, input(n, 1), input(n, 8), input(n, 9), &w) ||
      !dequantize_transposed(g, input(n, 2), input(n, 10), input(n, 11), &r))
    return false;
  Builder b{g, n, out};
  const int wv = add_constant(g, g.values[input(n, 1)].name + "/dequantized", std::move(w));
  const int rv = add_constant(g, g.values[input(n, 2)].name + "/dequantized", std::move(r));
  std::vector<int> ins{input(n, 0), wv, rv};
  for (size_t i = 3; i < 8; ++i) ins.push_back(input(n, i));  // B, sequence_lens, initial_h, initial_c, P
  while (!ins.empty() && ins.back() < 0) ins.pop_back();
  std::map<std::string, Attribute> attrs = n.attrs;
  auto int8_scales_attr = [&](int q, int scale, int zero, const char* name) {
    std::vector<float> scales;
    if (!int8_gate_scales(g, q, scale, zero, &scales)) return;
    Attribute a;
    a.type = Attribute::Type::kFloats;
    a.floats = std::move(scales);
    attrs[name] = std::move(a);
  };
  int8_scales_attr(input(n, 1), input(n, 8), input(n, 9), rnn::kLstmInt8WScales);
  int8_scales_attr(input(n, 2), input(n, 10), input(n, 11), rnn::kLstmInt8RScales);
  b.node("LSTM", ins, n.outputs, attrs);
  return true;
}

}  // namespace

int expand_contrib_ops(Graph& g, int64_t opset) {
  int expanded = 0;
  {
    const contrib::EnclosingGraph scope(g);
    for (auto& n : g.nodes)
      for (auto& kv : n.attrs) {
        if (kv.second.g) expanded += expand_contrib_ops(*kv.second.g, opset);
        for (auto& sg : kv.second.graphs) expanded += expand_contrib_ops(*sg, opset);
      }
  }
  std::vector<Node> nodes;
  nodes.reserve(g.nodes.size());
  int here = 0;
  const std::vector<std::function<bool(Graph&, const Node&, std::vector<Node>&, int64_t)>> rules{
      expand_gelu,          expand_quick_gelu,      expand_bias_add,          expand_bias_split_gelu,
      expand_gemm_fast_gelu, expand_fused_matmul,   expand_quantized_lstm,    expand_norm_contrib,
      expand_attention_contrib, expand_matmul_nbits, expand_quantized_contrib};
  for (auto& n : g.nodes) {
    bool done = false;
    // SimplifiedLayerNormalization: onnxruntime registers it in the default domain.
    if (n.domain == kOnnxruntimeDomain || n.op_type == "SimplifiedLayerNormalization")
      for (const auto& rule : rules)
        if ((done = rule(g, n, nodes, opset))) break;
    if (done) ++here;
    else nodes.push_back(std::move(n));
  }
  g.nodes = std::move(nodes);  // every node was moved into `nodes`
  if (here) g.topo_sort();
  return expanded + here;
}

}  // namespace twinfer::passes
