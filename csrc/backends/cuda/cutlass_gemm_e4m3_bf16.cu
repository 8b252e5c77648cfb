// scaled_gemm.h's kernel: E4M3 x E4M3 -> bfloat16 (cutlass_scaled_gemm.cuh).
#include "backends/cuda/cutlass_scaled_gemm.cuh"

namespace twinfer::cuda::cutlass_gemm {
namespace {
const bool registered = [] {
  register_scaled_gemm(Kernel<cutlass::float_e4m3_t, cutlass::bfloat16_t>::entry(DType::kFloat8E4M3FN, DType::kBFloat16,
                                                                   "cutlass fp8 sm90 (bfloat16 out, fast accumulation)"));
  return true;
}();
}  // namespace
}  // namespace twinfer::cuda::cutlass_gemm
