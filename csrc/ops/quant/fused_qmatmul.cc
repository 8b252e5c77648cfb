// com.twinfer::QMatMul (see qlinear_fused.h): the shape and type rule. The
// CPU kernel (oneDNN int8 matmul) is backends/cpu/onednn_fused_qmatmul.cc.
#include "graph/domains.h"
#include "ops/quant/qlinear_fused.h"
#include "ops/schema.h"

namespace twinfer::quant {
namespace {

bool is_q8(DType t) { return t == DType::kInt8 || t == DType::kUInt8; }
bool is_float(DType t) { return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16; }

// [K, N] of the constant weights, honouring trans_b.
bool weight_kn(const graph::Node& n, const SymShape& w, Dim* k, Dim* nn) {
  if (w.size() != 2) return false;
  const bool t = n.attr_int("trans_b", 0) != 0;
  *k = t ? w[1] : w[0];
  *nn = t ? w[0] : w[1];
  return true;
}

void qmatmul_infer(InferContext& c) {
  const DType xt = c.input_dtype(kQX);
  if (c.node().attr_int("x_per_token", 0) != 0) {
    if (!is_float(xt))
      c.fail(ErrorKind::kDType,
             std::string("QMatMul x must be float32, float16 or bfloat16 with x_per_token, got ") + dtype_name(xt));
    if (!(!c.has_input(kQXScale) && !c.has_input(kQXZero)))
      c.fail(ErrorKind::kModelFormat,
             "QMatMul with x_per_token takes no x_scale / x_zero_point (they are computed per row)");
    if (!(!c.has_input(kQXSmooth) || c.input_dtype(kQXSmooth) == DType::kFloat32))
      c.fail(ErrorKind::kDType, "QMatMul x_smooth must be float32");
  } else {
    if (!(is_q8(xt))) c.fail(ErrorKind::kDType, std::string("QMatMul x must be uint8/int8, got ") + dtype_name(xt));
    if (!(!c.has_input(kQXSmooth))) c.fail(ErrorKind::kModelFormat, "QMatMul x_smooth needs x_per_token = 1");
  }
  if (!(c.input_dtype(kQW) == DType::kInt8)) c.fail(ErrorKind::kDType, "QMatMul w must be int8");
  const bool quantized_out = c.has_input(kQYScale) && c.has_input(kQYZero);
  const DType out = quantized_out ? c.input_dtype(kQYZero) : qmatmul_float_out(c.node());
  if (quantized_out && !is_q8(out)) c.fail(ErrorKind::kDType, "QMatMul y_zero_point must be uint8/int8");
  if (!quantized_out && !is_float(out))
    c.fail(ErrorKind::kDType, std::string("QMatMul out_dtype must be float32, float16 or bfloat16, got ") +
                                  dtype_name(out));
  if (!c.input_has_shape(kQX) || !c.input_has_shape(kQW)) return c.set_output_rank_unknown(0, out);
  const SymShape& x = c.input_shape(kQX);
  Dim k, n;
  if (!(weight_kn(c.node(), c.input_shape(kQW), &k, &n))) c.fail(ErrorKind::kShape, "QMatMul w must be 2-D");
  if (!(!x.empty())) c.fail(ErrorKind::kShape, "QMatMul x must have rank >= 1");
  if (x.back().known() && k.known())
    if (!(x.back().value == k.value))
      c.fail(ErrorKind::kShape,
             "inner dimensions differ: x " + sym_shape_str(x) + ", w " + sym_shape_str(c.input_shape(kQW)));
  SymShape y = x;
  y.back() = n;
  c.set_output(0, out, y);
}

}  // namespace

DType qmatmul_float_out(const graph::Node& n) {
  const int64_t t = n.attr_int("out_dtype", 0);
  return t ? dtype_from_onnx(static_cast<int>(t)) : DType::kFloat32;
}

TWINFER_REGISTER_SCHEMA(kQMatMulOp, qmatmul_infer, kTwinferDomain);

}  // namespace twinfer::quant
