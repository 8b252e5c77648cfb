// scaled_gemm.h's kernel: int8 x int8 -> bfloat16 (cutlass_scaled_gemm.cuh).
#include "backends/cuda/cutlass_scaled_gemm.cuh"

namespace twinfer::cuda::cutlass_gemm {
namespace {
const bool registered = [] {
  register_scaled_gemm(Kernel<int8_t, cutlass::bfloat16_t>::entry(DType::kInt8, DType::kBFloat16, "cutlass int8 sm90 (bfloat16 out)"));
  return true;
}();
}  // namespace
}  // namespace twinfer::cuda::cutlass_gemm
