// What the GEMM kernels do around cuBLASLt that its epilogues do not: the
// fused op's activation when cuBLASLt has no matching epilogue, Gemm's C
// broadcast into the output before a beta-scaled accumulate, and a MatMul
// operand's batches expanded where they broadcast both ways. Host-callable
// launchers; the kernels are in gemm_epilogue.cu.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "ops/nn/activation.h"
#include "ops/nn/batch_broadcast.h"

namespace twinfer::cuda {

// y[i] = act(y[i]) over n elements of `dtype` (float32, float16, bfloat16).
void apply_activation(void* y, int64_t n, DType dtype, const nn::Activation& act, cudaStream_t s);

// y[r, c] = act(y[r, c] + bias[c]) over float32 y[rows, n] (bias float32[n]).
void add_bias_activation_f32(float* y, int64_t rows, int64_t n, const float* bias, const nn::Activation& act,
                             cudaStream_t s);

// y[M, N] = c broadcast, c being [rows, cols] with rows in {1, M}, cols in {1, N}.
void broadcast_2d(const void* c, int64_t rows, int64_t cols, void* y, int64_t M, int64_t N, size_t elem_bytes,
                  cudaStream_t s);

// dst's nb matrices of `matrix_elems` elements each: matrix b is src's matrix
// nn::source_batch(g, b) (ops/nn/batch_broadcast.h), for a batched operand
// cuBLASLt cannot stride through.
void expand_batches(const void* src, const nn::BatchBroadcast& g, int64_t nb, int64_t matrix_elems, void* dst,
                    size_t elem_bytes, cudaStream_t s);

}  // namespace twinfer::cuda
