// scaled_int8_gemm.h's kernel writing int8 (cutlass_int8_gemm.cuh).
#include "backends/cuda/cutlass_int8_gemm.cuh"

namespace twinfer::cuda::cutlass_int8 {
namespace {
const bool registered = [] {
  register_scaled_int8_gemm(Kernel<int8_t>::entry(DType::kInt8, "cutlass int8 sm90 (int8 out)"));
  return true;
}();
}  // namespace
}  // namespace twinfer::cuda::cutlass_int8
