// What a fused com.twinfer Conv adds after cuDNN's convolution: the
// per-channel bias, the residual and the activation, in one pass.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "ops/nn/activation.h"

namespace twinfer::cuda {

// y[n, c, s] = act(y + bias[c] + residual[n, c, s]) over y = [N, C, spatial]
// (channels_last: y and the residual stored [N, spatial, C]); bias and
// residual may be null.
void conv_epilogue(void* y, const void* bias, const void* residual, int64_t n, int64_t channels, int64_t spatial,
                   DType dtype, const nn::Activation& act, cudaStream_t s, bool channels_last = false);

}  // namespace twinfer::cuda
