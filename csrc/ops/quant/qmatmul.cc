// MatMulInteger and QLinearMatMul: shape and type rules. The CPU kernels
// (oneDNN int8 matmul with zero point corrections, QLinearMatMul's
// requantization) are backends/cpu/onednn_matmul_integer.cc.
#include <algorithm>
#include <string>

#include "ops/quant/quant_util.h"

namespace twinfer::quant {
namespace {

bool is_q8(DType t) { return t == DType::kInt8 || t == DType::kUInt8; }

// Output shape of a MatMul-style product of inputs ia, ib (unknown dims where unknown).
void infer_matmul_shape(InferContext& c, size_t ia, size_t ib, DType out) {
  if (!c.input_has_shape(ia) || !c.input_has_shape(ib)) return c.set_output_rank_unknown(0, out);
  const SymShape& a = c.input_shape(ia);
  const SymShape& b = c.input_shape(ib);
  if (!(!a.empty() && !b.empty())) c.fail(ErrorKind::kShape, "MatMul operands must have rank >= 1");
  SymShape aa = a, bb = b;
  if (aa.size() == 1) aa.insert(aa.begin(), Dim(1));
  if (bb.size() == 1) bb.push_back(Dim(1));
  const size_t rank = std::max(aa.size(), bb.size());
  while (aa.size() < rank) aa.insert(aa.begin(), Dim(1));
  while (bb.size() < rank) bb.insert(bb.begin(), Dim(1));
  const Dim& ka = aa[rank - 1];
  const Dim& kb = bb[rank - 2];
  if (ka.known() && kb.known())
    if (!(ka.value == kb.value))
      c.fail(ErrorKind::kShape, "inner dimensions differ: A " + sym_shape_str(a) + ", B " + sym_shape_str(b));
  SymShape y;
  for (size_t d = 0; d + 2 < rank; ++d) {
    const Dim &x = aa[d], &z = bb[d];
    if (x.known() && x.value == 1) y.push_back(z);
    else if (z.known() && z.value == 1) y.push_back(x);
    else if (x.known() && z.known()) {
      if (!(x.value == z.value))
        c.fail(ErrorKind::kShape,
               "batch dimensions do not broadcast: A " + sym_shape_str(a) + ", B " + sym_shape_str(b));
      y.push_back(x);
    } else {
      y.push_back(x.known() ? z : x);
    }
  }
  if (a.size() > 1) y.push_back(aa[rank - 2]);
  if (b.size() > 1) y.push_back(bb[rank - 1]);
  c.set_output(0, out, y);
}

// ---- MatMulInteger ---------------------------------------------------------------

void matmul_integer_infer(InferContext& c) {
  const DType at = c.input_dtype(0), bt = c.input_dtype(1);
  if (!(is_q8(at) && is_q8(bt)))
    c.fail(ErrorKind::kDType,
           std::string("MatMulInteger needs int8/uint8 inputs, got ") + dtype_name(at) + " and " + dtype_name(bt));
  if (c.has_input(2))
    if (!(c.input_dtype(2) == at)) c.fail(ErrorKind::kDType, "a_zero_point dtype differs from A's");
  if (c.has_input(3))
    if (!(c.input_dtype(3) == bt)) c.fail(ErrorKind::kDType, "b_zero_point dtype differs from B's");
  infer_matmul_shape(c, 0, 1, DType::kInt32);
}

// ---- QLinearMatMul -------------------------------------------------------------------
// Inputs: a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point.

bool is_qscale(DType t) { return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16; }

void qlinear_matmul_infer(InferContext& c) {
  const DType at = c.input_dtype(0), bt = c.input_dtype(3);
  if (!(is_q8(at) && is_q8(bt)))
    c.fail(ErrorKind::kDType,
           std::string("QLinearMatMul supports int8/uint8 inputs, got ") + dtype_name(at) + " and " + dtype_name(bt));
  if (!(c.input_dtype(2) == at && c.input_dtype(5) == bt))
    c.fail(ErrorKind::kDType, "zero point dtypes must match their inputs");
  const DType out = c.input_dtype(7);
  if (!(is_q8(out)))
    c.fail(ErrorKind::kDType, std::string("QLinearMatMul output must be int8/uint8, got ") + dtype_name(out));
  for (size_t i : {1, 4, 6})
    if (!(is_qscale(c.input_dtype(i))))
      c.fail(ErrorKind::kDType,
             std::string("scales must be float32/float16/bfloat16, got ") + dtype_name(c.input_dtype(i)));
  infer_matmul_shape(c, 0, 3, out);
}

}  // namespace

TWINFER_REGISTER_SCHEMA("MatMulInteger", matmul_integer_infer);
TWINFER_REGISTER_SCHEMA("QLinearMatMul", qlinear_matmul_infer);

}  // namespace twinfer::quant
