// Turning CUDA runtime errors into twinfer errors.
#pragma once
#include <cuda_runtime_api.h>

#include <string>

#include "core/error.h"

namespace twinfer::cuda {

inline void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // clear it, so the next call on this thread starts clean
  ErrorKind kind = e == cudaErrorMemoryAllocation ? ErrorKind::kOutOfMemory
                   : (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) ? ErrorKind::kDevice
                                                                                  : ErrorKind::kRuntime;
  throw Error(kind, std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace twinfer::cuda
