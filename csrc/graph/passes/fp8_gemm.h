// MatMul / Gemm with constant weights become com.twinfer::FP8MatMul
// (ops/quant/fp8_matmul.h): E4M3 activations and weights, float32 sums.
//
//   fp8_gemms        precision="fp8": every MatMul / Gemm (plain or fused
//                    com.twinfer) whose activation was calibrated and whose
//                    node is not kept in float; per-tensor scales, the
//                    activation's amax / 448 and the weights' own.
//   fuse_fp8_qdq     an FP8 QDQ model planned for the GPU: Q -> DQ
//                    (float8e4m3fn, per tensor) on the activation and
//                    DQ(float8e4m3fn constant) on the weights around a
//                    MatMul / Gemm, with any precision (on the CPU the Q/DQ
//                    stay and the weights fold to float32).
// Both store the weights as [N, K] E4M3 (K-major, the layout cuBLASLt's FP8
// kernels read) and keep the bias and activation of a fused op.
#pragma once
#include <map>
#include <set>
#include <string>

#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {

int fp8_gemms(graph::Graph& g, const std::map<std::string, float>& activation_amax,
              const std::set<std::string>& keep_float, const PassContext& ctx);

int fuse_fp8_qdq(graph::Graph& g, const PassContext& ctx);

}  // namespace twinfer::passes
