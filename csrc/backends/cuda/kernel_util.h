// What every CUDA kernel's host side needs: the stream it was given, and a
// check right after a launch (a bad configuration fails here, naming the
// kernel, instead of at some later synchronisation).
#pragma once
#include <cuda_runtime_api.h>

#include "backends/cuda/cuda_check.h"
#include "core/device_api.h"
#include "ops/elementwise/typeset.h"
#include "ops/kernel.h"

namespace twinfer::cuda {

inline cudaStream_t stream_of(const KernelContext& ctx) {
  if (!ctx.stream) throw Error(ErrorKind::kRuntime, "a CUDA kernel ran without a stream");
  return reinterpret_cast<cudaStream_t>(ctx.stream->handle());
}

inline void check_launch(const char* what) { check(cudaGetLastError(), what); }

// dtypes the CUDA elementwise kernels are built for; a node of another dtype
// runs on the CPU (placement falls back and kernel_report says why).
inline constexpr unsigned kCudaElementwiseTypes = ew::kF32 | ew::kF16 | ew::kBF16 | ew::kF64 | ew::kI32 | ew::kI64 |
                                                  ew::kI8 | ew::kU8 | ew::kBool;

}  // namespace twinfer::cuda
