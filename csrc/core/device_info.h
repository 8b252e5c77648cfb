// What the build and the machine offer, for build_info() / cuda_available().
#pragma once
#include <string>

namespace twinfer {
bool cuda_compiled();
int cuda_device_count();              // 0 when no driver/GPU (never throws)
std::string cuda_runtime_version();   // "" when not compiled
std::string cuda_device_name(int i);  // "" when unavailable
}  // namespace twinfer
