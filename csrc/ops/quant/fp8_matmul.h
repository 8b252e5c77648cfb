// com.twinfer::FP8MatMul: a MatMul / Gemm with float8 E4M3 operands and
// float32 accumulation (precision="fp8", and FP8 QDQ models; both built by
// graph/passes/fp8_gemm.cc):
//
//   xq = e4m3(x / x_scale)          per element, round to nearest even, saturated to +-448
//   y  = act(sum_k xq[.., k] * w[n, k] * (x_scale * w_scale) + bias[n])
//
// inputs: 0 x        float32 / float16 / bfloat16 [.., K] (y has its type)
//         1 x_scale  float32, one element (constant)
//         2 w        float8e4m3fn [N, K] (constant: K-major, the layout
//                    cuBLASLt's FP8 kernels read)
//         3 w_scale  float32, one element (constant)
//         4 bias     float32 [N] (optional, constant)
// attributes: activation / activation_params (ops/nn/activation.h).
#pragma once
#include <cstdint>
#include <string>

#include "core/float8.h"
#if defined(__CUDACC__)
#include <cuda_fp8.h>
#endif

namespace twinfer {
class KernelBuildInfo;
}

namespace twinfer::quant {

inline constexpr const char* kFP8MatMulOp = "FP8MatMul";

enum FP8MatMulInput : int { kF8X = 0, kF8XScale, kF8W, kF8WScale, kF8Bias, kF8NumInputs };

// x / x_scale as E4M3 bits, the way every FP8MatMul kernel rounds it.
TWINFER_HD uint8_t fp8_quantize(float x, float x_scale) {
#if defined(__CUDA_ARCH__)
  // The GPU's own conversion (one instruction from sm_89): the same round to
  // nearest even and saturation as float_to_float8; NaN (whose sign the
  // instruction may not keep) goes the portable way.
  const float v = x / x_scale;
  if (v == v) return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
#endif
  return float_to_float8(static_cast<double>(x / x_scale), Float8Traits<float8_e4m3fn_t>::fmt(), true);
}

// What every FP8MatMul kernel needs: constant float32 scales and bias,
// constant weights (the CPU reference and cuBLASLt's alike).
bool fp8_matmul_supports(const KernelBuildInfo& info, std::string* why);

}  // namespace twinfer::quant
