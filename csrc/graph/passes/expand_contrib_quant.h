// onnxruntime's quantized contrib ops (com.microsoft), as its quantizer
// writes them in the QOperator format and its optimizer's fusions leave
// them, rewritten into standard ops: each becomes DequantizeLinear of its
// inputs, the float op, and QuantizeLinear of its output, the form a QDQ
// model has, which the QDQ passes then fuse into integer kernels where the
// pattern allows.
//
//   QLinearAdd / QLinearMul           -> DQ, DQ -> Add / Mul -> Q (QLinearAdd with
//                                        constant scales in the output's units, as
//                                        onnxruntime computes it: DQ by sa / sc and
//                                        sb / sc, Add the output zero point, Q by 1,
//                                        so exact half levels round as its do)
//   QLinearSigmoid / QLinearLeakyRelu -> DQ -> Sigmoid / LeakyRelu -> Q
//   QLinearSoftmax (opset attribute)  -> DQ -> Softmax (or Flatten, Softmax,
//                                        Reshape for the opset < 13 meaning) -> Q
//   QLinearAveragePool / QLinearGlobalAveragePool (channels_last: Transposes)
//   QLinearConcat, QLinearReduceMean, QLinearWhere
//   QGemm                             -> DQ, DQ -> Gemm (the int32 C as
//                                        float, scale alpha * a_scale * b_scale) [-> Q]
//   DynamicQuantizeMatMul             -> DynamicQuantizeLinear -> MatMulInteger
//                                        -> Cast -> Mul(scales) [-> Add bias]
//   MatMulIntegerToFloat              -> MatMulInteger -> Cast -> Mul(scales) [-> Add bias]
//   QuantizeLinear / DequantizeLinear -> the ai.onnx ops
//
// A form not covered (an output zero point left out whose type cannot be
// told, per-column scales before opset 13, ...) stays as it is and is
// reported as unsupported.
#pragma once
#include <cstdint>
#include <vector>

#include "graph/ir.h"

namespace twinfer::passes {

// Appends the replacement of `n` to `out` and returns true when `n` is one
// of the ops above in a covered form. `opset`: the model's ai.onnx opset.
bool expand_quantized_contrib(graph::Graph& g, const graph::Node& n, std::vector<graph::Node>& out, int64_t opset);

}  // namespace twinfer::passes
