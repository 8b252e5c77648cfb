// Conv (ai.onnx) and the fused Conv of domain com.twinfer:
//   y = act(conv(x, w, b) + residual)
// com.twinfer Conv = Conv's inputs (x, w, [b]) plus an optional input 3
// `residual` (same shape as y), and attributes `activation` /
// `activation_params` (see activation.h). The fusion pass builds these nodes;
// graph/passes/channels_last.h their channels-last form (com.twinfer.nhwc).
// This header gives kernels the resolved geometry of one node.
#pragma once
#include <cstdint>

#include "core/shape.h"
#include "graph/domains.h"
#include "ops/kernel.h"
#include "ops/nn/activation.h"
#include "ops/nn/window.h"

namespace twinfer::nn {

struct ConvSpec {
  // Logical [N, C, spatial...], [M, C/group, k...], [N, M, out...] whatever
  // the layout: a channels-last Conv (com.twinfer.nhwc, graph/domains.h)
  // stores x, the residual and y as [N, spatial..., C] and w as KRSC
  // [M, k..., C/group], and says so here.
  Shape x, w, y;
  bool channels_last = false;
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
