// com.twinfer::MatMulW8, weight-only int8 (twinfer.load(..., weights="int8")):
//
//   y[.., N] = act(x[.., K] x dequant(W) + bias)      x, y float32
//   inputs: x, w int8 [N, K] (one row per output channel, constant),
//           w_scale float32 [N], bias float32 [N] (optional)
//   attributes: activation / activation_params (ops/nn/activation.h)
//
// The weights stay int8 in the engine; the CPU kernel, which expands them
// tile by tile inside a oneDNN sgemm, is backends/cpu/onednn_matmul_w8.cc.
#include "graph/domains.h"
#include "ops/schema.h"

namespace twinfer::quant {
namespace {

void matmul_w8_infer(InferContext& c) {
  if (!(c.input_dtype(0) == DType::kFloat32)) c.fail(ErrorKind::kDType, "MatMulW8 x must be float32");
  if (!(c.input_dtype(1) == DType::kInt8)) c.fail(ErrorKind::kDType, "MatMulW8 w must be int8");
  if (!c.input_has_shape(0) || !c.input_has_shape(1)) return c.set_output_rank_unknown(0, DType::kFloat32);
  const SymShape& x = c.input_shape(0);
  const SymShape& w = c.input_shape(1);
  if (!(w.size() == 2 && x.size() >= 1)) c.fail(ErrorKind::kShape, "MatMulW8 needs x of rank >= 1 and 2-D w");
  if (x.back().known() && w[1].known())
    if (!(x.back().value == w[1].value))
      c.fail(ErrorKind::kShape, "inner dimensions differ: x " + sym_shape_str(x) + ", w [N, K] " + sym_shape_str(w));
  SymShape y = x;
  y.back() = w[0];
  c.set_output(0, DType::kFloat32, y);
}

}  // namespace

TWINFER_REGISTER_SCHEMA("MatMulW8", matmul_w8_infer, kTwinferDomain);

}  // namespace twinfer::quant
