// Per-token int8 quantization on CUDA (ops/quant/token_quant.h): the rows
// of x quantized with their own scales, for QMatMul with x_per_token
// (gemm_qlinear.cc) and com.twinfer::TokenQDQ (token_qdq.cc). Host-callable
// launchers; the kernels are in token_quant.cu, their arithmetic the
// inline functions of token_quant.h that the CPU kernels run too.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace twinfer::cuda {

// q[r, 0..k) = x's row r quantized, q[r, k..kp) = 0 (the GEMM's padding),
// scales[r] = its scale; x is [rows, k] of type xt (float32, float16 or
// bfloat16; 16-bit values are widened exactly), q [rows, kp] int8.
// smooth (device, k factors, or nullptr): rows of x[r, i] * smooth[i]
// (QMatMul's x_smooth), as the CPU's quantize_token_rows computes them.
void quantize_token_rows(const void* x, DType xt, int64_t rows, int64_t k, int64_t kp, int8_t* q, float* scales,
                         const float* smooth, cudaStream_t s);

// y = x quantized per row and dequantized again (TokenQDQ), [rows, k].
void token_qdq_rows(const float* x, int64_t rows, int64_t k, float* y, cudaStream_t s);

}  // namespace twinfer::cuda
