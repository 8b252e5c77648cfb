#include "graph/passes/expand_contrib_quant.h"

#include <cmath>
#include <cstring>
#include <map>
#include <string>

#include "graph/passes/expand_contrib_util.h"

namespace twinfer::passes {

namespace {

using namespace contrib;

bool is_8bit(DType t) { return t == DType::kInt8 || t == DType::kUInt8; }

// The 8-bit type of quantized value v, from its zero point's constant or its
// own declared type; kUndefined when neither tells.
DType quantized_type(const Graph& g, int v, int zero_point) {
  if (zero_point >= 0 && g.values[zero_point].is_constant() && is_8bit(g.values[zero_point].constant.dtype()))
    return g.values[zero_point].constant.dtype();
  if (v >= 0 && is_8bit(g.values[v].dtype)) return g.values[v].dtype;
  return DType::kUndefined;
}

int scalar_zero(Builder& b, DType t) {
  Tensor z = Tensor::empty(t, {});
  std::memset(z.data(), 0, z.bytes());
  return b.constant("zero_point", std::move(z));
}

// The output zero point: the given one, else a zero of the inputs' 8-bit
// type (these ops' outputs have their inputs' type; QuantizeLinear without a
// zero point would make uint8). -2 when that type cannot be told.
int output_zero_point(Builder& b, int given, int like, int like_zero_point) {
  if (given >= 0) return given;
  const DType t = quantized_type(b.g, like, like_zero_point);
  if (t == DType::kUndefined) return -2;
  return t == DType::kUInt8 ? -1 : scalar_zero(b, t);
}

int dequantize(Builder& b, int x, int scale, int zero_point, const std::string& what,
               std::map<std::string, Attribute> attrs = {}) {
  std::vector<int> ins{x, scale};
  if (zero_point >= 0) ins.push_back(zero_point);
  return b.node("DequantizeLinear", ins, {b.value(what)}, std::move(attrs));
}

void quantize(Builder& b, int y, int scale, int zero_point, int out) {
  std::vector<int> ins{y, scale};
  if (zero_point >= 0) ins.push_back(zero_point);
  b.node("QuantizeLinear", ins, {out});
}

// X, X_scale, X_zero_point, Y_scale, Y_zero_point around one float op
// built by `body` from the dequantized X; false when the output's zero point
// type cannot be told (nothing is added then).
template <typename Body>
bool unary(Graph& g, const Node& n, std::vector<Node>& out, Body body) {
  std::vector<Node> nodes;
  Builder b{g, n, nodes};
  const int zy = output_zero_point(b, input(n, 4), input(n, 0), input(n, 2));
  if (zy == -2) return false;
  const int x = dequantize(b, input(n, 0), input(n, 1), input(n, 2), "x");
  const int y = body(b, x);
  if (y < 0) return false;
  quantize(b, y, input(n, 3), zy, output(n, 0));
  for (auto& m : nodes) out.push_back(std::move(m));
  return true;
}

// Attributes copied but the ones named.
std::map<std::string, Attribute> attrs_without(const Node& n, std::initializer_list<const char*> drop) {
  std::map<std::string, Attribute> a = n.attrs;
  for (const char* d : drop) a.erase(d);
  return a;
}

// NCHW <-> NHWC perms for a rank-r tensor.
std::vector<int64_t> to_channels_first(int64_t r) {
  std::vector<int64_t> p{0, r - 1};
  for (int64_t i = 1; i < r - 1; ++i) p.push_back(i);
  return p;
}
std::vector<int64_t> to_channels_last(int64_t r) {
  std::vector<int64_t> p{0};
  for (int64_t i = 2; i < r; ++i) p.push_back(i);
  p.push_back(1);
  return p;
}

// The value of v when it is a one-element float32 constant, positive and finite.
bool scalar_scale(const Graph& g, int v, float* out) {
  if (v < 0 || !g.values[v].is_constant()) return false;
  const Tensor& t = g.values[v].constant;
  if (t.dtype() != DType::kFloat32 || t.numel() != 1) return false;
  *out = *t.data_as<float>();
  return *out > 0.f && *out < 3.0e38f;
}

// The value of zero point v when it is a one-element uint8 / int8 constant.
bool scalar_int(const Graph& g, int v, int* out) {
  if (!g.values[v].is_constant() || g.values[v].constant.numel() != 1) return false;
  const Tensor& t = g.values[v].constant;
  if (t.dtype() == DType::kUInt8) *out = t.data_as<uint8_t>()[0];
  else if (t.dtype() == DType::kInt8) *out = t.data_as<int8_t>()[0];
  else return false;
  return true;
}

int scalar_constant(Builder& b, const std::string& what, float v) {
  Tensor t = Tensor::empty(DType::kFloat32, {});
  *t.data_as<float>() = v;
  return b.constant(what, std::move(t));
}

bool expand_binary(Graph& g, const Node& n, std::vector<Node>& out) {
  const bool add = is_contrib(n, "QLinearAdd");
  if (!add && !is_contrib(n, "QLinearMul")) return false;
  std::vector<Node> nodes;
  Builder b{g, n, nodes};
  const int zc = output_zero_point(b, input(n, 7), input(n, 0), input(n, 2));
  if (zc == -2) return false;
  int sa = input(n, 1), sb = input(n, 4), sc = input(n, 6);
  // QLinearAdd as onnxruntime computes it, in the output's units:
  // round((a - za) * (sa / sc) + (b - zb) * (sb / sc) + zc), the scale ratios
  // computed once in float32 and the zero point added before rounding
  // (an Add of it, then QuantizeLinear by 1 with a zero point of 0;
  // fuse_qdq_binary folds that Add into QBinary's offset). Summed in real
  // units and divided by sc instead, the rounding errors of the two scaled
  // terms decide exact half levels, which the quantizer's scales make
  // common: GELU's Erf(x) + 1 with Erf on 1/127.5 and the 1 on 1/255 has a
  // half level at every input, and that form rounded 40% of them down; and
  // a zero point added after rounding moves every tie when it is odd.
  float va = 0.f, vb = 0.f, vc = 0.f;
  int zero = 0;  // the output zero point's value (the ratio form adds it before rounding)
  const DType zt = zc >= 0 && g.values[zc].is_constant() ? g.values[zc].constant.dtype()
                                                         : quantized_type(g, input(n, 0), input(n, 2));
  const bool ratio = add && scalar_scale(g, sa, &va) && scalar_scale(g, sb, &vb) && scalar_scale(g, sc, &vc) &&
                     std::isfinite(va / vc) && std::isfinite(vb / vc) && va / vc > 0.f && vb / vc > 0.f &&
                     (zc < 0 || scalar_int(g, zc, &zero)) && zt != DType::kUndefined;
  if (ratio) {
    sa = scalar_constant(b, "a_scale_ratio", va / vc);
    sb = scalar_constant(b, "b_scale_ratio", vb / vc);
    sc = scalar_constant(b, "unit_scale", 1.f);
  }
  const int a = dequantize(b, input(n, 0), sa, input(n, 2), "a");
  const int c = dequantize(b, input(n, 3), sb, input(n, 5), "b");
  int y = b.node(add ? "Add" : "Mul", {a, c}, {b.value("sum")});
  if (ratio && zero != 0) {
    y = b.node("Add", {y, scalar_constant(b, "output_zero_point", static_cast<float>(zero))}, {b.value("shifted")});
    quantize(b, y, sc, scalar_zero(b, zt), output(n, 0));
  } else {
    quantize(b, y, sc, zc, output(n, 0));
  }
  for (auto& m : nodes) out.push_back(std::move(m));
  return true;
}

bool expand_activation(Graph& g, const Node& n, std::vector<Node>& out) {
  if (is_contrib(n, "QLinearSigmoid"))
    return unary(g, n, out, [](Builder& b, int x) { return b.node("Sigmoid", {x}, {b.value("y")}); });
  if (is_contrib(n, "QLinearLeakyRelu")) {
    const float alpha = n.attr_float("alpha", 0.01f);
    return unary(g, n, out, [alpha](Builder& b, int x) {
      return b.node("LeakyRelu", {x}, {b.value("y")}, {{"alpha", float_attr(alpha)}});
    });
  }
  return false;
}

bool expand_softmax(Graph& g, const Node& n, std::vector<Node>& out, int64_t opset) {
  if (!is_contrib(n, "QLinearSoftmax")) return false;
  const int64_t axis = n.attr_int("axis", -1);
  const int64_t meaning = n.attr_int("opset", opset);
  if (meaning >= 13 && opset < 13) return false;  // one axis, in a model whose Softmax flattens: not written
  return unary(g, n, out, [&](Builder& b, int x) {
    if (meaning >= 13) return b.node("Softmax", {x}, {b.value("y")}, {{"axis", int_attr(axis)}});
    // Before opset 13 Softmax normalises over everything from `axis` on.
    const int rows = b.node("Flatten", {x}, {b.value("rows")}, {{"axis", int_attr(axis)}});
    const int p = b.node("Softmax", {rows}, {b.value("p")}, {{"axis", int_attr(opset >= 13 ? -1 : 1)}});
    const int shape = b.node("Shape", {x}, {b.value("shape")});
    return b.node("Reshape", {p, shape}, {b.value("y")});
  });
}

bool expand_pool(Graph& g, const Node& n, std::vector<Node>& out) {
  const bool global = is_contrib(n, "QLinearGlobalAveragePool");
  if (!global && !is_contrib(n, "QLinearAveragePool")) return false;
  const bool channels_last = n.attr_int("channels_last", 0) != 0;
  int64_t rank = -1;
  if (channels_last) {
    if (!global) rank = static_cast<int64_t>(n.attr_ints("kernel_shape").size()) + 2;
    else if (g.values[input(n, 0)].has_shape) rank = static_cast<int64_t>(g.values[input(n, 0)].shape.size());
    if (rank < 3) return false;
  }
  auto attrs = attrs_without(n, {"channels_last"});
  return unary(g, n, out, [&](Builder& b, int x) {
    if (channels_last) x = b.node("Transpose", {x}, {b.value("nchw")}, {{"perm", ints_attr(to_channels_first(rank))}});
    int y = b.node(global ? "GlobalAveragePool" : "AveragePool", {x}, {b.value("pooled")}, attrs);
    if (channels_last) y = b.node("Transpose", {y}, {b.value("nhwc")}, {{"perm", ints_attr(to_channels_last(rank))}});
    return y;
  });
}

bool expand_reduce_mean(Graph& g, const Node& n, std::vector<Node>& out, int64_t opset) {
  if (!is_contrib(n, "QLinearReduceMean")) return false;
  const std::vector<int64_t> axes = n.attr_ints("axes");
  const int64_t keepdims = n.attr_int("keepdims", 1);
  return unary(g, n, out, [&](Builder& b, int x) {
    if (axes.empty() || opset < 18) {
      std::map<std::string, Attribute> a{{"keepdims", int_attr(keepdims)}};
      if (!axes.empty()) a["axes"] = ints_attr(axes);
      return b.node("ReduceMean", {x}, {b.value("mean")}, a);
    }
    Tensor t = Tensor::empty(DType::kInt64, {static_cast<int64_t>(axes.size())});
    std::memcpy(t.data(), axes.data(), axes.size() * sizeof(int64_t));
    return b.node("ReduceMean", {x, b.constant("axes", std::move(t))}, {b.value("mean")},
                  {{"keepdims", int_attr(keepdims)}});
  });
}

// Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per input.
bool expand_concat(Graph& g, const Node& n, std::vector<Node>& out) {
  if (!is_contrib(n, "QLinearConcat")) return false;
  if (n.inputs.size() < 5 || (n.inputs.size() - 2) % 3 != 0 || !n.has_attr("axis")) return false;
  std::vector<Node> nodes;
  Builder b{g, n, nodes};
  const int zy = output_zero_point(b, input(n, 1), input(n, 2), input(n, 4));
  if (zy == -2) return false;
  std::vector<int> parts;
  for (size_t i = 2; i + 2 < n.inputs.size(); i += 3)
    parts.push_back(dequantize(b, input(n, i), input(n, i + 1), input(n, i + 2), "part"));
  const int y = b.node("Concat", parts, {b.value("joined")}, {{"axis", int_attr(n.attr_int("axis", 0))}});
  quantize(b, y, input(n, 0), zy, output(n, 0));
  for (auto& m : nodes) out.push_back(std::move(m));
  return true;
}

// condition, X, x_scale, x_zero_point, Y, y_scale, y_zero_point, z_scale, z_zero_point.
bool expand_where(Graph& g, const Node& n, std::vector<Node>& out) {
  if (!is_contrib(n, "QLinearWhere")) return false;
  std::vector<Node> nodes;
  Builder b{g, n, nodes};
  const int zz = output_zero_point(b, input(n, 8), input(n, 1), input(n, 3));
  if (zz == -2) return false;
  const int x = dequantize(b, input(n, 1), input(n, 2), input(n, 3), "x");
  const int y = dequantize(b, input(n, 4), input(n, 5), input(n, 6), "y");
  const int z = b.node("Where", {input(n, 0), x, y}, {b.value("z")});
  quantize(b, z, input(n, 7), zz, output(n, 0));
  for (auto& m : nodes) out.push_back(std::move(m));
  return true;
}

// QGemm's int32 C as float32 when C and the scales are constants: C *
// alpha * a_scale * b_scale (b_scale one or one per column, C's last dim),
// the constant bias fuse_qdq folds into the int8 kernel.
bool float_bias(const Graph& g, int c, int a_scale, int b_scale, float alpha, Tensor* out) {
  auto constant = [&](int v) { return v >= 0 && g.values[v].is_constant() ? &g.values[v].constant : nullptr; };
  const Tensor *ct = constant(c), *as = constant(a_scale), *bs = constant(b_scale);
  if (!ct || !as || !bs || ct->dtype() != DType::kInt32 || as->dtype() != DType::kFloat32 ||
      bs->dtype() != DType::kFloat32 || as->numel() != 1)
    return false;
  const int64_t columns = bs->numel();
  if (columns != 1 && (ct->shape().empty() || ct->shape().back() != columns)) return false;
  *out = Tensor::empty(DType::kFloat32, ct->shape());
  const double a = static_cast<double>(*as->data_as<float>()) * alpha;
  for (int64_t i = 0; i < ct->numel(); ++i)
    out->data_as<float>()[i] =
        static_cast<float>(ct->data_as<int32_t>()[i] * a * bs->data_as<float>()[columns == 1 ? 0 : i % columns]);
  return true;
}

// A, a_scale, a_zero_point, B, b_scale, b_zero_point [, C int32] [, y_scale, y_zero_point].
bool expand_qgemm(Graph& g, const Node& n, std::vector<Node>& out, int64_t opset) {
  if (!is_contrib(n, "QGemm")) return false;
  const int c = input(n, 6), y_scale = input(n, 7), y_zero = input(n, 8);
  if ((y_scale >= 0) != (y_zero >= 0)) return false;  // a scale without a zero point: the type is unclear
  const int b_scale = input(n, 4);
  const bool per_column =
      !g.values[b_scale].is_constant() || g.values[b_scale].constant.numel() != 1;
  if (per_column && opset < 13) return false;  // DequantizeLinear has no axis before 13
  const int64_t trans_b = n.attr_int("transB", 0);
  const float alpha = n.attr_float("alpha", 1.f);
  std::vector<Node> nodes;
  Builder b{g, n, nodes};
  const int a = dequantize(b, input(n, 0), input(n, 1), input(n, 2), "a");
  std::map<std::string, Attribute> axis;
  if (opset >= 13) axis["axis"] = int_attr(trans_b ? 0 : 1);  // B's column (N) axis
  const int w = dequantize(b, input(n, 3), b_scale, input(n, 5), "b", axis);
  std::vector<int> ins{a, w};
  Tensor folded;
  if (c >= 0 && float_bias(g, c, input(n, 1), b_scale, alpha, &folded)) {
    ins.push_back(b.constant("c", std::move(folded)));
  } else if (c >= 0) {
    // The int32 C is added to the accumulator: its scale is alpha * a_scale * b_scale.
    const int cf = b.node("Cast", {c}, {b.value("c_float")}, {{"to", int_attr(dtype_to_onnx(DType::kFloat32))}});
    int scale = b.node("Mul", {input(n, 1), b_scale}, {b.value("c_scale")});
    if (alpha != 1.f) {
      Tensor t = Tensor::empty(DType::kFloat32, {});
      *t.data_as<float>() = alpha;
      scale = b.node("Mul", {scale, b.constant("alpha", std::move(t))}, {b.value("c_scale_alpha")});
    }
    ins.push_back(b.node("Mul", {cf, scale}, {b.value("c")}));
  }
  std::map<std::string, Attribute> attrs{{"alpha", float_attr(alpha)},
                                         {"transA", int_attr(n.attr_int("transA", 0))},
                                         {"transB", int_attr(trans_b)}};
  const int y = b.node("Gemm", ins, {y_scale >= 0 ? b.value("y") : output(n, 0)}, attrs);
  if (y_scale >= 0) quantize(b, y, y_scale, y_zero, output(n, 0));
  for (auto& m : nodes) out.push_back(std::move(m));
  return true;
}

// The integer product as float, times the product of the scales, plus bias:
// the tail of onnxruntime's own dynamic quantization, which
// fuse_matmul_integer recognises.
void integer_product_to_float(Builder& b, int product, int a_scale, int b_scale, int bias, int out) {
  const int f = b.node("Cast", {product}, {b.value("product_float")}, {{"to", int_attr(dtype_to_onnx(DType::kFloat32))}});
  const int scale = b.node("Mul", {a_scale, b_scale}, {b.value("scale")});
  if (bias < 0) {
    b.node("Mul", {f, scale}, {out});
    return;
  }
  const int scaled = b.node("Mul", {f, scale}, {b.value("scaled")});
  b.node("Add", {scaled, bias}, {out});
}

// A (float), B, b_scale [, b_zero_point] [, bias].
bool expand_dynamic_quantize_matmul(Graph& g, const Node& n, std::vector<Node>& out) {
  if (!is_contrib(n, "DynamicQuantizeMatMul")) return false;
  Builder b{g, n, out};
  const int aq = b.value("a_quantized"), as = b.value("a_scale"), az = b.value("a_zero_point");
  b.node("DynamicQuantizeLinear", {input(n, 0)}, {aq, as, az});
  std::vector<int> ins{aq, input(n, 1), az};
  if (input(n, 3) >= 0) ins.push_back(input(n, 3));
  const int p = b.node("MatMulInteger", ins, {b.value("product")});
  integer_product_to_float(b, p, as, input(n, 2), input(n, 4), output(n, 0));
  return true;
}

// A, B, a_scale, b_scale [, a_zero_point] [, b_zero_point] [, bias].
bool expand_matmul_integer_to_float(Graph& g, const Node& n, std::vector<Node>& out) {
  if (!is_contrib(n, "MatMulIntegerToFloat")) return false;
  Builder b{g, n, out};
  std::vector<int> ins{input(n, 0), input(n, 1), input(n, 4), input(n, 5)};
  while (ins.back() < 0) ins.pop_back();
  const int p = b.node("MatMulInteger", ins, {b.value("product")});
  integer_product_to_float(b, p, input(n, 2), input(n, 3), input(n, 6), output(n, 0));
  return true;
}

bool expand_qdq(const Node& n, std::vector<Node>& out, int64_t opset) {
  if (!is_contrib(n, "QuantizeLinear") && !is_contrib(n, "DequantizeLinear")) return false;
  // Before opset 13 the ai.onnx ops have no axis: only the default one is the same.
  if (opset < 13 && n.attr_int("axis", 1) != 1) return false;
  Node same = n;
  same.domain.clear();
  out.push_back(std::move(same));
  return true;
}

}  // namespace

bool expand_quantized_contrib(Graph& g, const Node& n, std::vector<Node>& out, int64_t opset) {
  return expand_binary(g, n, out) || expand_activation(g, n, out) || expand_softmax(g, n, out, opset) ||
         expand_pool(g, n, out) || expand_reduce_mean(g, n, out, opset) || expand_concat(g, n, out) ||
         expand_where(g, n, out) || expand_qgemm(g, n, out, opset) || expand_dynamic_quantize_matmul(g, n, out) ||
         expand_matmul_integer_to_float(g, n, out) || expand_qdq(n, out, opset);
}

}  // namespace twinfer::passes
