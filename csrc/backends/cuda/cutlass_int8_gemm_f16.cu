// scaled_int8_gemm.h's kernel writing float16 (cutlass_int8_gemm.cuh).
#include "backends/cuda/cutlass_int8_gemm.cuh"

namespace twinfer::cuda::cutlass_int8 {
namespace {
const bool registered = [] {
  register_scaled_int8_gemm(Kernel<cutlass::half_t>::entry(DType::kFloat16, "cutlass int8 sm90 (float16 out)"));
  return true;
}();
}  // namespace
}  // namespace twinfer::cuda::cutlass_int8
