#include "graph/passes/lower_precision.h"

#include <cmath>
#include <map>
#include <set>

#include "graph/domains.h"
#include "graph/passes/rewrite_util.h"
#include "ops/quant/fp8_matmul.h"
#include "ops/quant/qbinary.h"
#include "ops/quant/qlinear_fused.h"
#include "ops/quant/token_qdq.h"
#include "ops/schema.h"

namespace twinfer::passes {

namespace {

bool has_subgraph(const graph::Node& n) {
  for (const auto& kv : n.attrs)
    if (kv.second.g || !kv.second.graphs.empty()) return true;
  return false;
}

// Inputs whose float32 is part of the op's definition, not a precision
// choice: FP8MatMul's scales and bias (its x and y follow the precision);
// Resize's roi and scales and Upsample's scales, which decide the output's
// shape (a scale of 1.1 is 1.0996 in fp16: 10 rows became 10, not 11).
bool stays_float32(const graph::Node& n, size_t input) {
  if (n.domain == kTwinferDomain && n.op_type == quant::kFP8MatMulOp) return input != quant::kF8X;
  if (n.domain == kTwinferDomain && n.op_type == quant::kQMatMulOp) return input != quant::kQX;
  return n.domain.empty() && (n.op_type == "Resize" || n.op_type == "Upsample") && input > 0;
}

// How a node's type is chosen, after torch.autocast's lists: GEMMs and
// convolutions always run in the lower type (their float32 operands cast);
// ops whose results leave 16 bits' range or precision (exp, log, pow, sums
// and products, cumulative sums) and the model's own casts to float32 never
// do; every other op runs in the type its operands arrive in: lower only when
// every float operand that is not a constant already is.
enum class Rule { kLower, kFloat32, kFollow };

bool is_quantization_op(const graph::Node& n) {
  static const std::set<std::string> onnx{"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
                                          "QLinearConv",    "QLinearMatMul",    "MatMulInteger", "ConvInteger"};
  static const std::set<std::string> ours{quant::kQMatMulOp, quant::kQConvOp, quant::kQBinaryOp, quant::kTokenQDQOp,
                                          "MatMulW8"};
  return (n.domain.empty() && onnx.count(n.op_type)) || (n.domain == kTwinferDomain && ours.count(n.op_type));
}

// A QMatMul with a float side: x quantized per token as it is read, or y
// written in float (no y_scale). Its kernels read and write those in 16 bits
// (out_dtype; qlinear_fused.h), its scales staying float32: lowered, the
// Cast -> QMatMul -> Clip -> Cast around it in an int8 BERT's fp16 rest
// (36 Clips and 50 Casts, 1.9 of 16.9 ms on an H200) are gone, and the
// residual Adds after it follow in 16 bits.
bool is_float_io_qmatmul(const graph::Node& n) {
  if (n.domain != kTwinferDomain || n.op_type != quant::kQMatMulOp) return false;
  const bool quantized_out = n.inputs.size() > quant::kQYZero && n.inputs[quant::kQYScale] >= 0 &&
                             n.inputs[quant::kQYZero] >= 0;  // as its shape rule reads it
  return n.attr_int("x_per_token", 0) != 0 || !quantized_out;
}

// Such a QMatMul's float output that is a graph output (a classifier's
// logits) stays float32: lowered, it would be rounded to 16 bits and cast
// back for the caller.
bool float_out_is_graph_output(const graph::Graph& g, const graph::Node& n) {
  return !n.outputs.empty() && n.outputs[0] >= 0 && g.values[n.outputs[0]].dtype == DType::kFloat32 &&
         is_graph_output(g, n.outputs[0]);
}

void set_float_out(graph::Node& n, DType to) {
  graph::Attribute a;
  a.type = graph::Attribute::Type::kInt;
  a.i = dtype_to_onnx(to);
  n.attrs["out_dtype"] = a;
}

Rule rule_of(const graph::Node& n, bool quantized_ops_float32) {
  if (is_float_io_qmatmul(n)) return Rule::kLower;
  if (quantized_ops_float32 && is_quantization_op(n)) return Rule::kFloat32;
  // Our other fused int8 ops read float32 scales and write int8 or float32
  // in every mode: lowered to follow their constant scales, an imported QDQ
  // model's QConv failed its build at precision="fp16" (pipecat's smart-turn,
  // a Whisper encoder quantized by onnxruntime).
  if (n.domain == kTwinferDomain && (n.op_type == quant::kQConvOp || n.op_type == quant::kQBinaryOp))
    return Rule::kFloat32;
  static const std::set<std::string> lower{"MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum", "Attention"};
  static const std::set<std::string> float32{
      "Exp",       "Log",        "Pow",         "Reciprocal",      "Softplus",  "CumSum", "ReduceSum",
      "ReduceProd", "ReduceSumSquare", "ReduceL1", "ReduceL2",    "ReduceLogSum", "ReduceLogSumExp",
      "Acos",      "Asin",       "Cosh",        "Sinh",            "Tan"};
  if (n.domain == kTwinferDomain && (lower.count(n.op_type) || n.op_type == quant::kFP8MatMulOp)) return Rule::kLower;
  if (!n.domain.empty()) return Rule::kFollow;
  if (lower.count(n.op_type)) return Rule::kLower;
  if (float32.count(n.op_type)) return Rule::kFloat32;
  // The model's own cast to float32 (an int mask or position made float, an
  // fp16 model's float32 island) keeps its word: 70000 as fp16 is inf.
  if ((n.op_type == "Cast" && n.attr_int("to", 0) == dtype_to_onnx(DType::kFloat32)) || n.op_type == "CastLike")
    return Rule::kFloat32;
  return Rule::kFollow;
}

// Whether float32 constant `t` means the same in `to`: no finite value past
// the type's largest, and a scalar (an epsilon, a scale) not below its
// smallest normal (1e-12 is 0 in fp16, 1e5 is inf). A tensor's tiny
// elements only lose precision, as any rounding does.
bool representable(const Tensor& t, DType to) {
  if (t.dtype() != DType::kFloat32) return true;
  const float largest = to == DType::kFloat16 ? 65504.f : 3.3895313892515355e38f;  // largest_finite
  const float smallest_normal = to == DType::kFloat16 ? 6.103515625e-05f : 1.1754943508222875e-38f;
  const float* p = t.data_as<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float a = std::fabs(p[i]);
    if (std::isfinite(a) && (a > largest || (t.numel() == 1 && a != 0.f && a < smallest_normal))) return false;
  }
  return true;
}

// The node as it would be in `to`: a one-node graph with the lowered types,
// converted constants, and Cast's target rewritten.
graph::Node lowered_copy(const graph::Graph& g, const graph::Node& n, DType to,
                         const std::function<Tensor(const Tensor&)>& convert, graph::Graph* mini) {
  graph::Node copy = n;
  auto remap = [&](int v) -> int {
    if (v < 0) return v;
    graph::Value val = g.values[v];
    val.producer = -1;
    if (val.dtype == DType::kFloat32) {
      val.dtype = to;
      if (val.is_constant()) val.constant = convert(val.constant);
    }
    const int id = static_cast<int>(mini->values.size());
    mini->values.push_back(std::move(val));
    return id;
  };
  for (size_t i = 0; i < copy.inputs.size(); ++i) {
    const int v = copy.inputs[i];
    if (v >= 0 && stays_float32(n, i)) {
      copy.inputs[i] = static_cast<int>(mini->values.size());
      mini->values.push_back(g.values[v]);
      mini->values.back().producer = -1;
    } else {
      copy.inputs[i] = remap(v);
    }
  }
  for (int& v : copy.outputs) v = remap(v);
  if (is_float_io_qmatmul(n) && !copy.outputs.empty() && copy.outputs[0] >= 0 &&
      mini->values[copy.outputs[0]].dtype == to)
    set_float_out(copy, to);
  return copy;
}

// Outputs whose float32 is part of the op's definition: those its shape rule
// types float32 when the node's other float32 values are `to`
// (LayerNormalization's Mean / InvStdDev, in its stash_type; the kernels
// write them as float32). Asked of the lowered one-node graph, whose values
// it leaves as they were but for those outputs, set back to float32. An op
// without a rule, or whose rule refuses the node, keeps none.
std::vector<char> outputs_staying_float32(graph::Graph& mini, const graph::Node& n, DType to, int64_t opset) {
  std::vector<char> keep(n.outputs.size(), 0);
  const OpSchema* schema = find_schema(n.domain, n.op_type);
  if (!schema) return keep;
  const std::vector<graph::Value> before = mini.values;
  try {
    InferContext ic(mini, n, opset);
    schema->infer(ic);
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      const int v = n.outputs[k];
      keep[k] = v >= 0 && before[v].dtype == to && mini.values[v].dtype == DType::kFloat32;
    }
  } catch (const Error&) {
  }
  mini.values = before;
  for (size_t k = 0; k < n.outputs.size(); ++k)
    if (keep[k]) mini.values[n.outputs[k]].dtype = DType::kFloat32;
  return keep;
}

float largest_finite(DType to) { return to == DType::kFloat16 ? 65504.f : 3.3895313892515355e38f; }

// Clip(x, -limit, limit): bounds as inputs from opset 11, attributes before.
// `name` by value: add_constant below grows g.values, where a caller's name may live.
graph::Node clip_node(graph::Graph& g, std::string name, int in, int out, float limit, int64_t opset) {
  graph::Node c;
  c.name = name;
  c.op_type = "Clip";
  c.inputs = {in};
  c.outputs = {out};
  if (opset >= 11) {
    for (float b : {-limit, limit}) {
      Tensor t = Tensor::empty(DType::kFloat32, {});
      *t.data_as<float>() = b;
      c.inputs.push_back(add_constant(g, name + (b < 0 ? "/min" : "/max"), std::move(t)));
    }
  } else {
    graph::Attribute lo, hi;
    lo.type = hi.type = graph::Attribute::Type::kFloat;
    lo.f = -limit;
    hi.f = limit;
    c.attrs["min"] = lo;
    c.attrs["max"] = hi;
  }
  return c;
}

// The saturating conversion lowering puts in front of a lowered reader,
// Clip(-limit, limit) -> Cast(to), moved above the Transposes and Reshapes
// that lead to it: they then move 16-bit values, and a Transpose feeding an
// attention is one the attention views take in place. An int8 BERT's
// Q/K/V projections leave float32 rows (QMatMul) that go Reshape ->
// Transpose -> Clip -> Cast -> Attention: 48 Transposes took 1.8 of its
// 16.9 ms on an H200. Applied while a layout op's output has no other reader.
// `saturating`: the values those Clips write (lower_precision made them).
int hoist_conversions_above_layout_ops(graph::Graph& g, DType to, const std::set<int>& saturating) {
  int moved = 0;
  for (bool again = true; again;) {
    again = false;
    const auto users = value_users(g);
    std::vector<int> producer(g.values.size(), -1);
    for (size_t i = 0; i < g.nodes.size(); ++i)
      for (int o : g.nodes[i].outputs)
        if (o >= 0) producer[o] = static_cast<int>(i);
    auto only_reader = [&](int v, int node) {
      return users[v].size() == 1 && users[v][0] == node && !is_graph_output(g, v);
    };
    for (size_t i2 = 0; i2 < g.nodes.size() && !again; ++i2) {
      const graph::Node& cast = g.nodes[i2];
      if (!cast.domain.empty() || cast.op_type != "Cast" || cast.attr_int("to", 0) != dtype_to_onnx(to) ||
          cast.inputs.empty() || cast.inputs[0] < 0)
        continue;
      const int c = cast.inputs[0];
      const int i1 = producer[c];
      if (i1 < 0 || g.nodes[i1].op_type != "Clip" || !g.nodes[i1].domain.empty() || !only_reader(c, static_cast<int>(i2)))
        continue;
      if (!saturating.count(c)) continue;  // a model's own Clip keeps its place
      const int y = g.nodes[i1].inputs[0];
      const int il = y >= 0 ? producer[y] : -1;
      if (il < 0 || !only_reader(y, i1)) continue;
      const graph::Node& layout = g.nodes[il];
      if (!layout.domain.empty() || (layout.op_type != "Transpose" && layout.op_type != "Reshape") ||
          layout.inputs.empty() || layout.outputs.size() != 1)
        continue;
      const int x = layout.inputs[0];
      if (x < 0 || g.values[x].dtype != DType::kFloat32 || g.values[x].is_constant()) continue;
      // Clip and Cast now read x; the layout op reads the 16-bit copy and
      // writes the Cast's old output, z. In the node order: Clip where the
      // layout op was, Cast where the Clip was, the layout op where the Cast was.
      const int z = cast.outputs[0];
      const int low = add_value(g, g.values[x].name + "@" + dtype_name(to));
      g.values[low].dtype = to;
      g.values[low].has_shape = g.values[x].has_shape;
      g.values[low].shape = g.values[x].shape;
      g.values[c].has_shape = g.values[x].has_shape;
      g.values[c].shape = g.values[x].shape;
      graph::Node clip = g.nodes[i1], conv = g.nodes[i2], lay = g.nodes[il];
      clip.inputs[0] = x;
      conv.outputs[0] = low;
      lay.inputs[0] = low;
      lay.outputs[0] = z;
      g.nodes[il] = std::move(clip);
      g.nodes[i1] = std::move(conv);
      g.nodes[i2] = std::move(lay);
      ++moved;
      again = true;
    }
  }
  return moved;
}

}  // namespace

int lower_precision(graph::Graph& g, const LowerPrecisionOptions& o, PassContext& pc) {
  const DType F = DType::kFloat32, T = o.to;
  auto is_f32 = [&](int v) { return v >= 0 && g.values[v].dtype == F; };

  // 1. Which nodes compute in `to`, in graph order (rule_of): those touching
  // float32 whose rule allows it and that have a kernel for the lowered types.
  std::vector<char> low(g.nodes.size(), 0);
  std::vector<char> low_value(g.values.size(), 0);           // written in `to` by a node lowered so far
  std::vector<std::vector<char>> keep_f32(g.nodes.size());  // per output: stays float32 (outputs_staying_float32)
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const graph::Node& n = g.nodes[i];
    // Inputs whose float32 is the op's own (stays_float32: scales, a
    // bias) do not count: lowering would change nothing there.
    bool touches = false;
    for (size_t k = 0; k < n.inputs.size(); ++k) touches = touches || (is_f32(n.inputs[k]) && !stays_float32(n, k));
    for (int v : n.outputs) touches = touches || is_f32(v);
    if (!touches || has_subgraph(n)) continue;
    if (is_float_io_qmatmul(n) && float_out_is_graph_output(g, n)) continue;
    const Rule rule = rule_of(n, o.quantized_ops_float32);
    if (rule == Rule::kFloat32) continue;
    if (rule == Rule::kFollow) {
      // A float32 graph input is float32 to the ops that read it, as in
      // autocast: counted as lowered, a timestep's Mul -> Sin/Cos embedding
      // lost its phase (errors of 0.2 in fp16, 1.9 in bf16), Floor of
      // 2049.5 gave 2050, and TopK's indices swapped near-ties. Only the
      // GEMMs that read it cast it down.
      bool follows = true;
      for (size_t k = 0; k < n.inputs.size() && follows; ++k) {
        const int v = n.inputs[k];
        if (v < 0 || !is_f32(v) || stays_float32(n, k)) continue;
        follows = g.values[v].is_constant() ? representable(g.values[v].constant, T) : low_value[v] != 0;
      }
      for (const auto& kv : n.attrs)  // ConstantOfShape's value
        follows = follows && (kv.second.type != graph::Attribute::Type::kTensor || representable(kv.second.t, T));
      if (!follows) continue;
    }
    graph::Graph mini;
    const graph::Node copy = lowered_copy(g, n, T, o.convert, &mini);
    mini.nodes.push_back(copy);
    keep_f32[i] = outputs_staying_float32(mini, mini.nodes.back(), T, pc.opset);
    low[i] = o.supports(mini, mini.nodes.back());
    if (low[i])
      for (size_t k = 0; k < n.outputs.size(); ++k)
        if (is_f32(n.outputs[k]) && !keep_f32[i][k]) low_value[n.outputs[k]] = 1;
  }

  // 2. Rewrite, in order: a lowered node reads lowered values (float32
  // operands cast, constants converted); any other reader of a lowered value
  // gets a cast back to float32.
  std::map<int, int> as_low, as_f32;  // value -> its twin in `to` / back in float32
  std::set<int> saturating;           // the saturating Clips' outputs (hoist_conversions_above_layout_ops)
  std::vector<graph::Node> nodes;
  nodes.reserve(g.nodes.size() * 2);
  auto lowered_twin = [&](int v) -> int {
    auto it = as_low.find(v);
    if (it != as_low.end()) return it->second;
    int id;
    if (g.values[v].is_constant()) {
      id = add_constant(g, g.values[v].name + "@" + dtype_name(T), o.convert(g.values[v].constant));
    } else {
      // Saturating, as the constants are: a mask input's finfo.min is
      // -65504, not -inf (a fully masked softmax row stays finite).
      const int clipped = add_value(g, g.values[v].name + "@clipped");
      saturating.insert(clipped);
      g.values[clipped].dtype = F;
      g.values[clipped].has_shape = g.values[v].has_shape;
      g.values[clipped].shape = g.values[v].shape;
      nodes.push_back(clip_node(g, g.values[clipped].name, v, clipped, largest_finite(T), pc.opset));
      id = add_value(g, g.values[v].name + "@" + dtype_name(T));
      g.values[id].dtype = T;
      g.values[id].has_shape = g.values[v].has_shape;
      g.values[id].shape = g.values[v].shape;
      nodes.push_back(cast_node(g.values[id].name, clipped, id, T));
    }
    as_low[v] = id;
    return id;
  };
  auto float_twin = [&](int v) -> int {
    auto it = as_f32.find(v);
    if (it != as_f32.end()) return it->second;
    const int id = add_value(g, g.values[v].name + "@float32");
    g.values[id].dtype = F;
    g.values[id].has_shape = g.values[v].has_shape;
    g.values[id].shape = g.values[v].shape;
    nodes.push_back(cast_node(g.values[id].name, v, id, F));
    as_f32[v] = id;
    return id;
  };
  std::vector<char> lowered(g.values.size(), 0);  // produced in `to` by a lowered node
  int count = 0;
  const std::vector<graph::Node> old = g.nodes;
  for (size_t i = 0; i < old.size(); ++i) {
    graph::Node n = old[i];
    if (low[i]) {
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        int& v = n.inputs[k];
        if (v >= 0 && !lowered[v] && g.values[v].dtype == F && !stays_float32(n, k)) v = lowered_twin(v);
      }
      for (size_t k = 0; k < n.outputs.size(); ++k)
        if (const int v = n.outputs[k]; v >= 0 && g.values[v].dtype == F && !keep_f32[i][k]) {
          g.values[v].dtype = T;
          lowered.resize(g.values.size(), 0);
          lowered[v] = 1;
          if (k == 0 && is_float_io_qmatmul(n)) set_float_out(n, T);
        }
      ++count;
    } else {
      for (int& v : n.inputs)
        if (v >= 0 && v < static_cast<int>(lowered.size()) && lowered[v]) v = float_twin(v);
    }
    lowered.resize(g.values.size(), 0);
    nodes.push_back(std::move(n));
  }
  for (int& out : g.outputs)
    if (out >= 0 && out < static_cast<int>(lowered.size()) && lowered[out]) out = float_twin(out);
  g.nodes = std::move(nodes);
  const int hoisted = count ? hoist_conversions_above_layout_ops(g, T, saturating) : 0;
  for (auto& v : g.values) v.producer = -1;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int out : g.nodes[i].outputs)
      if (out >= 0) g.values[out].producer = static_cast<int>(i);
  if (hoisted)
    pc.note(std::string(dtype_name(T)) + ": " + std::to_string(hoisted) +
            " conversions moved above the Transposes / Reshapes before them");
  if (count)
    pc.note(std::string(dtype_name(T)) + ": " + std::to_string(count) + " nodes compute in " + dtype_name(T) + ", " +
            std::to_string(as_low.size()) + " values converted, " + std::to_string(as_f32.size()) +
            " cast back to float32");
  return count;
}

}  // namespace twinfer::passes
