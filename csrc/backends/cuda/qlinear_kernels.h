// Our own kernels around cuBLASLt's int8 GEMM for QMatMul / QConv (the
// operands packed the way its IMMA kernels read them, the epilogue from the
// int32 accumulator) and the direct int8 convolution of grouped QConvs.
// Host-callable launchers; the kernels are in qlinear_kernels.cu and their
// arithmetic in ops/quant/quant_math.h and conv_geometry.h.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "ops/quant/conv_geometry.h"
#include "ops/quant/quant_math.h"

namespace twinfer::cuda {

// out[r, k] = x[r, k] as int8 (uint8 shifted by -128), 0 for K <= k < kp.
void pack_int8_rows(const void* x, bool from_u8, int64_t rows, int64_t k, int64_t kp, int8_t* out, cudaStream_t s);

// cols[p, k] ([positions, kp] int8) for group 0: x's value (uint8 shifted by
// -128), `pad` in the padding, 0 for taps <= k < kp.
void im2col_int8(const void* x, bool from_u8, const quant::ConvGeometry& g, int8_t pad, int64_t kp, int8_t* cols,
                 cudaStream_t s);

// y from the accumulator acc[rows, ld]: e's value for n < channels, stored
// as yt (float32, or quantized int8/uint8); y row-major [rows, channels], or
// in conv's layout when conv is given (rows = its positions).
void linear_epilogue(const int32_t* acc, int64_t rows, int64_t channels, int64_t ld, const quant::LinearEpilogue& e,
                     void* y, DType yt, const quant::ConvGeometry* conv, cudaStream_t s);

// y = d[positions, ld] (int8, the GEMM's row-major output) in conv's layout.
void scatter_conv_output(const int8_t* d, int64_t ld, const quant::ConvGeometry& g, int8_t* y, cudaStream_t s);

// A grouped (depthwise) int8 convolution, one thread per output element:
// acc = sum of (x - x_zero) * w over the group's taps, then e (whose x_zero
// is 0: the zero point is taken out per element).
void qconv_direct(const void* x, bool x_u8, int32_t x_zero, const int8_t* w, const quant::ConvGeometry& g,
                  const quant::LinearEpilogue& e, void* y, DType yt, cudaStream_t s);

}  // namespace twinfer::cuda
