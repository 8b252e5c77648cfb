// scaled_gemm.h's kernel: int8 x int8 -> float32 (cutlass_scaled_gemm.cuh).
#include "backends/cuda/cutlass_scaled_gemm.cuh"

namespace twinfer::cuda::cutlass_gemm {
namespace {
const bool registered = [] {
  register_scaled_gemm(Kernel<int8_t, float>::entry(DType::kInt8, DType::kFloat32, "cutlass int8 sm90 (float32 out)"));
  return true;
}();
}  // namespace
}  // namespace twinfer::cuda::cutlass_gemm
