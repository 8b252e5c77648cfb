// A dynamically quantized MatMul as onnxruntime's quantize_dynamic writes it,
//
//   DynamicQuantizeLinear(x) -> x_q, x_scale, x_zero_point
//   MatMulInteger(x_q, W_q, x_zero_point [, W_zero_point = 0]) -> Cast(float)
//     -> Mul(., Mul(x_scale, W_scale)) [-> Add(., bias)]
//
// becomes one com.twinfer::QMatMul whose x_scale and x_zero_point are the
// run's values (the CPU kernel hands them to oneDNN's epilogue): the int32
// product never reaches memory, and the Cast, the two Muls and the bias Add
// (four passes over the output) are gone. The DynamicQuantizeLinear stays:
// the Q, K and V projections share one.
//
// CPU only: the device kernels take constant quantization parameters.
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {
int fuse_matmul_integer(graph::Graph& g, const PassContext& ctx);
}
