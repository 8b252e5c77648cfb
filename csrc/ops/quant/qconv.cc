// ConvInteger and QLinearConv: shape and type rules (1-3 spatial dims,
// groups, dilations, pads, auto_pad). The CPU kernels (im2col + oneDNN int8
// matmul, QLinearConv's requantization) are backends/cpu/onednn_conv_integer.cc.
#include <string>
#include <vector>

#include "ops/nn/window.h"
#include "ops/quant/qconv.h"
#include "ops/quant/quant_util.h"

namespace twinfer::quant {
namespace {

bool is_q8(DType t) { return t == DType::kInt8 || t == DType::kUInt8; }

void infer_qconv(InferContext& c, const ConvIO& io, DType out) {
  const graph::Node& n = c.node();
  if (!c.input_has_shape(io.x) || !c.input_has_shape(io.w)) return c.set_output_rank_unknown(0, out);
  const SymShape& xs = c.input_shape(io.x);
  const SymShape& ws = c.input_shape(io.w);
  if (!(xs.size() >= 3 && xs.size() <= 5 && ws.size() == xs.size()))
    c.fail(ErrorKind::kShape,
           "input " + sym_shape_str(xs) + " and weights " + sym_shape_str(ws) + " do not fit a 1-3 D convolution");
  const size_t nsp = xs.size() - 2;
  const int64_t group = n.attr_int("group", 1);
  if (!(group >= 1)) c.fail(ErrorKind::kModelFormat, "group must be >= 1");
  std::vector<int64_t> wk;
  bool known = true;
  for (size_t i = 0; i < nsp; ++i) {
    known = known && ws[2 + i].known();
    wk.push_back(ws[2 + i].value);
  }
  SymShape y{xs[0], ws[0]};
  if (!known && !n.has_attr("kernel_shape")) {
    for (size_t i = 0; i < nsp; ++i) y.push_back(Dim());
    return c.set_output(0, out, y);
  }
  nn::Window w = nn::parse_window(n, nsp, known ? &wk : nullptr, nn::WindowOptions{true, false});
  if (xs[1].known() && ws[1].known())
    if (!(xs[1].value == ws[1].value * group))
      c.fail(ErrorKind::kShape,
             "input has " + std::to_string(xs[1].value) + " channels but weights expect " +
                 std::to_string(ws[1].value) + " x group " + std::to_string(group));
  for (size_t i = 0; i < nsp; ++i) y.push_back(nn::window_output_dim(w, i, xs[2 + i], n));
  c.set_output(0, out, y);
}

void conv_integer_infer(InferContext& c) {
  const DType xt = c.input_dtype(0), wt = c.input_dtype(1);
  if (!(is_q8(xt) && is_q8(wt)))
    c.fail(ErrorKind::kDType,
           std::string("ConvInteger needs int8/uint8 inputs, got ") + dtype_name(xt) + " and " + dtype_name(wt));
  if (c.has_input(2)) if (!(c.input_dtype(2) == xt)) c.fail(ErrorKind::kDType, "x_zero_point dtype differs from x's");
  if (c.has_input(3)) if (!(c.input_dtype(3) == wt)) c.fail(ErrorKind::kDType, "w_zero_point dtype differs from w's");
  infer_qconv(c, kConvInteger, DType::kInt32);
}

void qlinear_conv_infer(InferContext& c) {
  const DType xt = c.input_dtype(0), wt = c.input_dtype(3), yt = c.input_dtype(7);
  if (!(is_q8(xt) && is_q8(wt) && is_q8(yt)))
    c.fail(ErrorKind::kDType,
           std::string("QLinearConv supports int8/uint8 data, got x ") + dtype_name(xt) + ", w " + dtype_name(wt) +
               ", y " + dtype_name(yt));
  if (!(c.input_dtype(2) == xt && c.input_dtype(5) == wt))
    c.fail(ErrorKind::kDType, "zero point dtypes must match their inputs");
  for (size_t i : {1, 4, 6})
    if (!(c.input_dtype(i) == DType::kFloat32))
      c.fail(ErrorKind::kDType,
             std::string("QLinearConv scales must be float32, got ") + dtype_name(c.input_dtype(i)));
  if (c.has_input(8))
    if (!(c.input_dtype(8) == DType::kInt32))
      c.fail(ErrorKind::kDType, std::string("QLinearConv bias must be int32, got ") + dtype_name(c.input_dtype(8)));
  infer_qconv(c, kQLinearConv, yt);
}

}  // namespace

TWINFER_REGISTER_SCHEMA("ConvInteger", conv_integer_infer);
TWINFER_REGISTER_SCHEMA("QLinearConv", qlinear_conv_infer);

}  // namespace twinfer::quant
