// Conv (ai.onnx) and the fused Conv of domain com.twinfer:
//   y = act(conv(x, w, b) + residual)
// com.twinfer Conv = Conv's inputs (x, w, [b]) plus an optional input 3
// `residual` (same shape as y), and attributes `activation` /
// `activation_params` (see activation.h). The fusion pass builds these nodes.
// This header gives kernels the resolved geometry of one node.
#pragma once
#include <cstdint>

#include "core/shape.h"
#include "ops/kernel.h"
#include "ops/nn/activation.h"
#include "ops/nn/window.h"

namespace twinfer::nn {

inline constexpr const char* kTwinferDomain = "com.twinfer";
// Plan-time ops whose float activations live in oneDNN's channel-blocked
// layout (nChw16c / nChw8c); graph/passes/blocked_layout.h builds them and
// documents the convention. Their Conv has the com.twinfer Conv's inputs and
// attributes, plus `plain_input` = 1 when x is plain NCHW (fewer channels
// than one block, e.g. the RGB image).
inline constexpr const char* kBlockedDomain = "com.twinfer.blocked";

struct ConvSpec {
  Shape x, w, y;        // [N, C, spatial...], [M, C/group, k...], [N, M, out...]
  int64_t group = 1;
  Window win;           // pads resolved for x's spatial size
  bool has_bias = false;
  bool has_residual = false;
  Activation act;       // kNone for ai.onnx Conv
  bool fused_domain = false;
};

// Reads and checks the node against its concrete shapes; throws Error
// naming the node when they do not fit.
ConvSpec conv_spec(const KernelBuildInfo& info);

}  // namespace twinfer::nn
