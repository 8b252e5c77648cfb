// Device facts from the CUDA runtime (linked statically, so this imports on
// machines without a driver and simply reports no devices there).
#include <cuda_runtime_api.h>

#include "core/device_info.h"

namespace twinfer {

bool cuda_compiled() { return true; }

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

std::string cuda_runtime_version() {
  int v = 0;
  cudaRuntimeGetVersion(&v);
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

std::string cuda_device_name(int i) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, i) != cudaSuccess) {
    cudaGetLastError();
    return "";
  }
  return p.name;
}

}  // namespace twinfer
