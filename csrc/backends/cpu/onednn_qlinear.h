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
// memories point into `p`, which must outlive the run.
void add_qlinear_args(const QLinearParams& p, std::unordered_map<int, dnnl::memory>& args);

}  // namespace twinfer::quant
