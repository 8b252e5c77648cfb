// com.twinfer::QConv (see qlinear_fused.h): the shape and type rule. The
// CPU kernel (oneDNN int8 convolution) is backends/cpu/onednn_fused_qconv.cc.
#include <vector>

#include "graph/domains.h"
#include "ops/nn/window.h"
#include "ops/quant/qlinear_fused.h"
#include "ops/schema.h"

namespace twinfer::quant {
namespace {

bool is_q8(DType t) { return t == DType::kInt8 || t == DType::kUInt8; }

DType output_type(const InferContext& c) {
  return c.has_input(kQYScale) && c.has_input(kQYZero) ? c.input_dtype(kQYZero) : DType::kFloat32;
}

void qconv_infer(InferContext& c) {
  const graph::Node& n = c.node();
  const DType xt = c.input_dtype(kQX);
  if (!(is_q8(xt))) c.fail(ErrorKind::kDType, std::string("QConv x must be uint8/int8, got ") + dtype_name(xt));
  if (!(c.input_dtype(kQW) == DType::kInt8)) c.fail(ErrorKind::kDType, "QConv w must be int8");
  const DType out = output_type(c);
  if (!(out == DType::kFloat32 || is_q8(out))) c.fail(ErrorKind::kDType, "QConv y_zero_point must be uint8/int8");
  if (!c.input_has_shape(kQX) || !c.input_has_shape(kQW)) return c.set_output_rank_unknown(0, out);
  const SymShape& xs = c.input_shape(kQX);
  const SymShape& ws = c.input_shape(kQW);
  if (!(xs.size() >= 3 && xs.size() <= 5 && ws.size() == xs.size()))
    c.fail(ErrorKind::kShape,
           "input " + sym_shape_str(xs) + " and weights " + sym_shape_str(ws) + " do not fit a 1-3 D convolution");
  const size_t nsp = xs.size() - 2;
  std::vector<int64_t> wk;
  for (size_t i = 0; i < nsp; ++i) {
    if (!(ws[2 + i].known())) c.fail(ErrorKind::kShape, "QConv weights must have known dims");
    wk.push_back(ws[2 + i].value);
  }
  nn::Window w = nn::parse_window(n, nsp, &wk, nn::WindowOptions{true, false});
  const int64_t group = n.attr_int("group", 1);
  if (xs[1].known() && ws[1].known())
    if (!(xs[1].value == ws[1].value * group))
      c.fail(ErrorKind::kShape,
             "input has " + std::to_string(xs[1].value) + " channels but weights expect " +
                 std::to_string(ws[1].value) + " x group " + std::to_string(group));
  SymShape y{xs[0], ws[0]};
  for (size_t i = 0; i < nsp; ++i) y.push_back(nn::window_output_dim(w, i, xs[2 + i], n));
  c.set_output(0, out, y);
}

}  // namespace

TWINFER_REGISTER_SCHEMA(kQConvOp, qconv_infer, kTwinferDomain);

}  // namespace twinfer::quant
