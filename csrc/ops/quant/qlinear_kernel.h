// What the QMatMul and QConv kernels share (ops in qlinear_fused.h): the
// constant quantization parameters read once at build, the oneDNN
// attributes that apply them, and the per-run arguments that carry them.
#pragma once
#include <unordered_map>
#include <vector>

#include "backends/cpu/onednn_common.h"
#include "ops/nn/activation.h"
#include "ops/quant/qlinear_fused.h"

namespace twinfer::quant {

struct QLinearParams {
  DType x_type = DType::kUInt8;
  int32_t x_zero = 0;
  std::vector<float> scales;  // x_scale * w_scale[c], one per output channel
  std::vector<float> bias;    // empty: none
  bool quantized_out = false;
  DType y_type = DType::kFloat32;
  float y_scale = 1.f;
  int32_t y_zero = 0;
  nn::Activation act;
};

// Reads and checks the node's constant inputs; `channels` is N (QMatMul) or
// M (QConv). Throws naming the node when an input is not what the op needs.
QLinearParams read_qlinear_params(const KernelBuildInfo& info, int64_t channels);

// Attributes: user scratchpad, weight scales with `weight_mask`, the
// zero points and destination scale in use, the activation as a post-op.
dnnl::primitive_attr qlinear_attr(const QLinearParams& p, int weight_mask);

// Adds the runtime scale / zero point arguments qlinear_attr declared; the
// memories point into `p`, which must outlive the run.
void add_qlinear_args(const QLinearParams& p, std::unordered_map<int, dnnl::memory>& args);

}  // namespace twinfer::quant
