// scaled_int8_gemm.h's kernel writing float32 (cutlass_int8_gemm.cuh).
#include "backends/cuda/cutlass_int8_gemm.cuh"

namespace twinfer::cuda::cutlass_int8 {
namespace {
const bool registered = [] {
  register_scaled_int8_gemm(Kernel<float>::entry(DType::kFloat32, "cutlass int8 sm90 (float32 out)"));
  return true;
}();
}  // namespace
}  // namespace twinfer::cuda::cutlass_int8
