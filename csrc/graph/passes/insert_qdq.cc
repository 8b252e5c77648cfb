#include "graph/passes/insert_qdq.h"

#include "graph/domains.h"
#include "graph/passes/bias_correction.h"
#include "graph/passes/rewrite_util.h"
#include "ops/quant/token_qdq.h"

#include <algorithm>
#include <cmath>

namespace twinfer::passes {

namespace {

const std::map<std::string, std::vector<size_t>>& quantizable() {
  // op -> inputs that are data (activations, or weights when constant)
  static const std::map<std::string, std::vector<size_t>> ops = {
      {"Conv", {0, 1}}, {"ConvTranspose", {0, 1}}, {"Gemm", {0, 1}}, {"MatMul", {0, 1}}};
  return ops;
}

Tensor scalar_f32(float v) {
  Tensor t = Tensor::empty(DType::kFloat32, {});
  *t.data_as<float>() = v;
  return t;
}

Tensor scalar_i8(int8_t v) {
  Tensor t = Tensor::empty(DType::kInt8, {});
  *t.data_as<int8_t>() = v;
  return t;
}

Tensor scalar_u8(uint8_t v) {
  Tensor t = Tensor::empty(DType::kUInt8, {});
  *t.data_as<uint8_t>() = v;
  return t;
}

// Per-channel symmetric int8 of a float32 weight along `axis`.
void quantize_weight(const Tensor& w, int64_t axis, Tensor* q, Tensor* scales, Tensor* zeros) {
  const Shape& s = w.shape();
  const int64_t channels = s[axis];
  int64_t inner = 1, outer = 1;
  for (size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
  for (int64_t d = 0; d < axis; ++d) outer *= s[d];
  *q = Tensor::empty(DType::kInt8, s);
  *scales = Tensor::empty(DType::kFloat32, {channels});
  *zeros = Tensor::empty(DType::kInt8, {channels});
  const float* x = w.data_as<float>();
  int8_t* y = q->data_as<int8_t>();
  for (int64_t c = 0; c < channels; ++c) {
    float amax = 0.f;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) amax = std::max(amax, std::fabs(x[(o * channels + c) * inner + i]));
    const float scale = amax > 0.f ? amax / 127.f : 1.f;
    scales->data_as<float>()[c] = scale;
    zeros->data_as<int8_t>()[c] = 0;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t k = (o * channels + c) * inner + i;
        y[k] = static_cast<int8_t>(std::clamp(std::nearbyint(x[k] / scale), -127.f, 127.f));
      }
  }
}

// The output-channel axis of a node's constant weight.
int64_t weight_axis(const graph::Node& n, size_t input, size_t rank) {
  if (n.op_type == "Conv") return 0;
  if (n.op_type == "ConvTranspose") return 1;  // [C, M/group, k...]: group 1 per channel of M
  if (n.op_type == "Gemm") return input == 1 ? (n.attr_int("transB", 0) ? 0 : 1) : (n.attr_int("transA", 0) ? 1 : 0);
  return static_cast<int64_t>(rank) - 1;  // MatMul B [.., K, N]: per column
}

// A QuantizeLinear / DequantizeLinear node for value `of`, named after it.
graph::Node qdq_node(const std::string& op, const std::string& of, std::vector<int> inputs, int output) {
  graph::Node n;
  n.name = of + "_" + op;
  n.op_type = op;
  n.inputs = std::move(inputs);
  n.outputs = {output};
  return n;
}

// Whether insert_qdq quantizes node n as a layer (a Conv / ConvTranspose /
// Gemm / MatMul with a constant weight whose activations are calibrated).
bool quantized_layer(const graph::Graph& g, const graph::Node& n, const QuantizeSpec& spec) {
  if (!n.domain.empty()) return false;
  auto it = quantizable().find(n.op_type);
  if (it == quantizable().end() || spec.keep_float.count(n.name)) return false;
  // Every data input must be quantizable: a calibrated activation or a float32 constant.
  bool has_weight = false;
  for (size_t k : it->second) {
    if (k >= n.inputs.size() || n.inputs[k] < 0) continue;
    const auto& v = g.values[n.inputs[k]];
    if (v.dtype != DType::kFloat32) return false;
    if (v.is_constant()) has_weight = true;
    else if (!spec.activation_amax.count(v.name)) return false;
  }
  if (n.op_type == "ConvTranspose" && n.attr_int("group", 1) != 1) return false;
  // Products of two activations (attention's Q.K^T and P.V) stay in float:
  // both operands would carry per-tensor error, which costs transformers
  // the most accuracy, and they hold no weights to shrink.
  return has_weight;
}

// An Add of two calibrated activations whose result (or its sole Relu's)
// a quantized layer reads (a ResNet or MobileNet residual connection): its
// inputs are quantized too, and the QDQ fusion then runs it as one int8 pass
// (com.twinfer::QBinary) between int8 convolutions. Other Adds (a
// transformer's residual before LayerNorm, one whose readers are kept in
// float or multiply two activations) stay float: quantizing them would only
// add error.
bool int8_residual_add(const graph::Graph& g, const graph::Node& n, const QuantizeSpec& spec,
                       const std::vector<std::vector<int>>& users) {
  if (n.inputs.size() != 2 || n.outputs.size() != 1 || n.outputs[0] < 0) return false;
  for (int in : n.inputs) {
    if (in < 0) return false;
    const auto& v = g.values[in];
    if (v.is_constant() || v.dtype != DType::kFloat32 || !spec.activation_amax.count(v.name)) return false;
  }
  const auto read_by_quantized_layer = [&](int v) {
    if (!spec.activation_amax.count(g.values[v].name)) return false;
    for (int u : users[v])
      if (quantized_layer(g, g.nodes[u], spec)) return true;
    return false;
  };
  const int out = n.outputs[0];
  if (read_by_quantized_layer(out)) return true;
  if (users[out].size() != 1) return false;
  const graph::Node& r = g.nodes[users[out][0]];
  return r.domain.empty() && r.op_type == "Relu" && !r.outputs.empty() && r.outputs[0] >= 0 &&
         read_by_quantized_layer(r.outputs[0]);
}

}  // namespace

int insert_qdq(graph::Graph& g, const QuantizeSpec& spec, const PassContext& ctx) {
  std::map<int, int> activation_dq;  // activation value -> its DequantizeLinear output (shared by readers)
  std::map<int, int> token_dq;       // activation value -> its TokenQDQ output (shared by readers)
  std::vector<graph::Node> added;
  int quantized = 0, corrected = 0, per_token = 0;
  const size_t original = g.nodes.size();
  const std::vector<std::vector<int>> users = value_users(g);
  // The DequantizeLinear output standing for activation `in` (one Q/DQ pair
  // per activation, shared by its readers).
  auto dequantized = [&](int in) {
    auto found = activation_dq.find(in);
    if (found != activation_dq.end()) return found->second;
    const graph::Value v = g.values[in];  // copy: adding values may move the vector
    const float amax = spec.activation_amax.at(v.name);
    // On the GPU every activation is signed int8 with zero point 0: cuBLASLt's
    // int8 kernels read int8 only, and zero points of 0 let a whole layer run
    // as one call (backends/cuda/gemm_qlinear.cc); a non-negative activation
    // then has 127 levels instead of 255.
    const bool is_unsigned = ctx.backend != Backend::kCUDA && spec.unsigned_activations.count(v.name) != 0;
    const float levels = is_unsigned ? 255.f : 127.f;
    const float scale = amax > 0.f ? amax / levels : 1.f;
    const int sv = add_constant(g, v.name + "_scale", scalar_f32(scale));
    const int zv = add_constant(g, v.name + "_zero_point", is_unsigned ? scalar_u8(0) : scalar_i8(0));
    const int qv = add_value(g, v.name + "_quantized");
    const int dv = add_value(g, v.name + "_dequantized");
    added.push_back(qdq_node("QuantizeLinear", v.name, {in, sv, zv}, qv));
    added.push_back(qdq_node("DequantizeLinear", v.name, {qv, sv, zv}, dv));
    activation_dq.emplace(in, dv);
    return dv;
  };
  // The TokenQDQ output standing for activation `in` quantized per token.
  auto token_dequantized = [&](int in) {
    auto found = token_dq.find(in);
    if (found != token_dq.end()) return found->second;
    const std::string name = g.values[in].name;
    const int dv = add_value(g, name + "_token_qdq");
    g.values[dv].dtype = DType::kFloat32;
    graph::Node n;
    n.name = name + "_TokenQDQ";
    n.domain = kTwinferDomain;
    n.op_type = quant::kTokenQDQOp;
    n.inputs = {in};
    n.outputs = {dv};
    added.push_back(std::move(n));
    token_dq.emplace(in, dv);
    ++per_token;
    return dv;
  };
  for (size_t i = 0; i < original; ++i) {
    graph::Node& n = g.nodes[i];
    if (!n.domain.empty()) continue;
    if (n.op_type == "Add" && !spec.keep_float.count(n.name) && int8_residual_add(g, n, spec, users)) {
      for (size_t k = 0; k < 2; ++k) g.nodes[i].inputs[k] = dequantized(g.nodes[i].inputs[k]);
      ++quantized;
      continue;
    }
    if (!quantized_layer(g, n, spec)) continue;
    const std::vector<size_t>& data_inputs = quantizable().at(n.op_type);
    // The activation a constant weight multiplies (read before input 0 is
    // rewired to its DequantizeLinear).
    const int x_in = n.inputs[0];
    const std::string activation = x_in >= 0 && !g.values[x_in].is_constant() ? g.values[x_in].name : "";
    for (size_t k : data_inputs) {
      if (k >= n.inputs.size() || n.inputs[k] < 0) continue;
      const int in = n.inputs[k];
      const graph::Value v = g.values[in];  // copy: adding values may move the vector
      if (v.is_constant()) {
        Tensor q, scales, zeros;
        const int64_t axis = weight_axis(n, k, v.constant.shape().size());
        if (v.constant.shape().empty()) continue;
        quantize_weight(v.constant, axis, &q, &scales, &zeros);
        if (k == 1 && !activation.empty()) {
          auto mean = spec.activation_channel_mean.find(activation);
          if (mean != spec.activation_channel_mean.end()) {
            const std::vector<float> shift = weight_rounding_shift(n, v.constant, q, scales, mean->second);
            if (!shift.empty() && subtract_from_bias(g, i, shift, users, &added)) ++corrected;
          }
        }
        const int qv = add_constant(g, v.name + "_int8", q);
        const int sv = add_constant(g, v.name + "_scale", scales);
        const int zv = add_constant(g, v.name + "_zero_point", zeros);
        const int out = add_value(g, v.name + "_dequantized");
        graph::Node dq = qdq_node("DequantizeLinear", v.name, {qv, sv, zv}, out);
        graph::Attribute a;
        a.type = graph::Attribute::Type::kInt;
        a.i = axis;
        dq.attrs["axis"] = a;
        added.push_back(std::move(dq));
        g.nodes[i].inputs[k] = out;
      } else if (k == 0 && (n.op_type == "MatMul" || n.op_type == "Gemm") && spec.per_token.count(v.name) &&
                 (n.op_type == "MatMul" || g.nodes[i].attr_int("transA", 0) == 0)) {
        g.nodes[i].inputs[k] = token_dequantized(in);
      } else {
        g.nodes[i].inputs[k] = dequantized(in);
      }
    }
    ++quantized;
  }
  for (auto& n : added) g.nodes.push_back(std::move(n));
  g.topo_sort();
  if (quantized) ctx.note("int8: quantized " + std::to_string(quantized) + " nodes (QDQ inserted)");
  if (per_token) ctx.note("int8: " + std::to_string(per_token) + " activations quantized per token (TokenQDQ)");
  if (corrected) ctx.note("int8: bias-corrected " + std::to_string(corrected) + " nodes for weight rounding");
  return quantized;
}

}  // namespace twinfer::passes
