// The FP8 GEMM's own kernel: activations rounded to E4M3 the way every
// FP8MatMul kernel rounds them (ops/quant/fp8_matmul.h), into the K-major
// rows cuBLASLt reads.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace twinfer::cuda {

// out[r, k] = e4m3(x[r, k] / x_scale) for k < K, 0 for K <= k < kp; x is
// float32 / float16 / bfloat16, x_scale a device pointer to one float.
void quantize_e4m3_rows(const void* x, DType xt, const float* x_scale, int64_t rows, int64_t k, int64_t kp,
                        uint8_t* out, cudaStream_t s);

}  // namespace twinfer::cuda
