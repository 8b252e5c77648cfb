// The constant quantization parameters of a QMatMul / QConv node (ops in
// qlinear_fused.h), read and checked once when a kernel is built. Backend
// neutral: the CPU kernels hand them to oneDNN (backends/cpu/onednn_qlinear.h).
#pragma once
#include <vector>

#include "ops/kernel.h"
#include "ops/nn/activation.h"
#include "ops/quant/qlinear_fused.h"

namespace twinfer::quant {

struct QLinearParams {
  DType x_type = DType::kUInt8;  // a float type when x is quantized per token (x_per_token)
  bool x_per_token = false;
  int32_t x_zero = 0;
  // x's scale / zero point arrive with each run (allow_runtime_x: what a
  // dynamic quantization, DynamicQuantizeLinear, computes per call); then
  // `scales` holds w_scale alone and x_zero is not used.
  bool x_scale_runtime = false;
  bool x_zero_runtime = false;
  std::vector<float> x_smooth;  // per token: x's channels multiplied by these before quantizing (empty: none)
  std::vector<float> scales;  // x_scale * w_scale[c] (per token or x_scale_runtime: w_scale[c]), one per output channel
  std::vector<float> bias;    // empty: none
  bool quantized_out = false;
  DType y_type = DType::kFloat32;  // without y_scale: QMatMul's out_dtype (float32, float16, bfloat16)
  float y_scale = 1.f;
  int32_t y_zero = 0;
  nn::Activation act;
};

// Reads and checks the node's constant inputs; `channels` is N (QMatMul) or
// M (QConv). Throws naming the node when an input is not what the op needs.
// With allow_runtime_x, x_scale and x_zero_point may be values computed at
// run time (one element each; the kernel reads them per run).
QLinearParams read_qlinear_params(const KernelBuildInfo& info, int64_t channels, bool allow_runtime_x = false);

}  // namespace twinfer::quant
