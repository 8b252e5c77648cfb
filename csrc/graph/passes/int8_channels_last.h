// int8 activations between QConv nodes stay channels-last (NHWC): oneDNN's
// int8 convolutions run on channels-last data, so a QConv that reads or writes
// plain NCHW reorders on the way in and out; the CUDA QConv's GEMM writes
// positions x channels, which is NHWC (in NCHW its epilogue scatters and the
// next convolution gathers again). The pass marks a producer's
// `y_channels_last` and each reader's `x_channels_last`; the kernels then
// hand oneDNN / cuBLASLt / cuDNN the buffer as NHWC. The value's logical
// shape stays NCHW (the same bytes, read in NHWC order).
//
// Residual networks: a QBinary (the int8 residual Add) whose inputs and
// output share one shape works on the bytes as they lie, so the values it
// joins form one group, NHWC as a whole: a ResNet's spine from its first
// quantized Add to its last. A group's value that another op reads (a float
// Add, a DequantizeLinear) is turned back to NCHW for it by a Reshape to
// [N, H, W, C] and a Transpose, once; a group is kept when its QConv ends
// are more than twice such conversions. torchvision's ResNet-50 int8 on two
// CPU cores, batch 8: 64 NHWC values and one conversion, 64.2 -> 46.0 ms.
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {

// Returns the number of values kept channels-last.
int int8_channels_last(graph::Graph& g, const PassContext& ctx);

}  // namespace twinfer::passes
