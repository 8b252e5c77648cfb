// Our own channels-last depthwise convolution (group == C == M, NHWC x and
// y, one or two spatial dims), with the fused Conv's bias, residual and
// activation applied before y is written: the other form of MobileNet's
// depthwise layers beside cuDNN's, which on an H200 ran MobileNetV2 fp16
// NHWC at batch 256 in 36 ms against 12.8 ms NCHW (2026-11-30). conv.cc
// times both when the plan is built and keeps the faster.
#pragma once
#include <cuda_runtime_api.h>

#include "backends/cuda/depthwise_math.h"
#include "core/dtype.h"
#include "ops/nn/activation.h"

namespace twinfer::cuda {

// y = act(depthwise(x, w) + bias + residual) for `batch` images. g is built
// with pack 1 (the launch picks its own); w is [KH, KW, C]; bias ([C]) and
// residual (y's shape, NHWC) may be null. float32, float16, bfloat16; sums
// in float32.
void depthwise_conv_nhwc(const DepthwiseGeometry& g, int64_t batch, const void* x, const void* w, const void* bias,
                         const void* residual, void* y, DType dtype, const nn::Activation& act, cudaStream_t s);

}  // namespace twinfer::cuda
