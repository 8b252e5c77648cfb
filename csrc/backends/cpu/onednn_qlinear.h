// What the oneDNN QMatMul and QConv kernels share (ops in
// ops/quant/qlinear_fused.h): the oneDNN attributes that apply the constant
// quantization parameters (ops/quant/qlinear_params.h) and the per-run
// arguments that carry them.
#pragma once
#include <unordered_map>
#include <vector>

#include "backends/cpu/onednn_common.h"
#include "ops/quant/qlinear_params.h"

namespace twinfer::quant {

// Attributes: user scratchpad, weight scales with `weight_mask`, the
// zero points and destination scale in use, the activation as a post-op.
dnnl::primitive_attr qlinear_attr(const QLinearParams& p, int weight_mask);

// Adds the runtime scale / zero point arguments qlinear_attr declared; the
// memories point into `p`, which must outlive the run, and for
// p.x_scale_runtime / p.x_zero_runtime at x_scale / x_zero (the run's values).
void add_qlinear_args(const QLinearParams& p, std::unordered_map<int, dnnl::memory>& args,
                      const float* x_scale = nullptr, const int32_t* x_zero = nullptr);

// A matmul of x quantized per token (p.x_per_token, ops/quant/token_quant.h),
// described as [1, M, K] x [1, K, N] -> [1, M, N] (the 3-D form is the one
// oneDNN's optimized kernels broadcast a per-row operand in): weight scales
// per N, then as post-ops the row scales (a binary multiply by [1, M, 1]),
// the bias (a binary add of [1, 1, N]: oneDNN adds DNNL_ARG_BIAS before
// post-ops, where the row scale would multiply it too) and the activation;
// the destination scale and zero point as in qlinear_attr.
dnnl::primitive_attr qlinear_token_attr(const QLinearParams& p, int64_t m, int64_t n);

// The runtime arguments qlinear_token_attr declared: `row_scales` (m
// floats, filled by the run) and the memories of `p`.
void add_qlinear_token_args(const QLinearParams& p, const float* row_scales, int64_t m, int64_t n,
                            std::unordered_map<int, dnnl::memory>& args);

}  // namespace twinfer::quant
