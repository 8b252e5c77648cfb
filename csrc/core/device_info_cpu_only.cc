// Device facts for a build without the CUDA backend (CMake leaves this file
// out when it builds csrc/backends/cuda).

#include "core/device_info.h"

namespace twinfer {
bool cuda_compiled() { return false; }
int cuda_device_count() { return 0; }
std::string cuda_runtime_version() { return ""; }
std::string cuda_device_name(int) { return ""; }
void set_cuda_library_path(const std::string&, const std::string&) {}
std::string cuda_library_version(const std::string&, std::string* why) {
  if (why) *why = "built without the CUDA backend";
  return "";
}
std::vector<std::string> cuda_symbol_problems() { return {}; }
void register_cuda_symbol_check(void (*)()) {}
std::string cudnn_frontend_version() { return ""; }
std::vector<std::string> cutlass_gemm_kernels() { return {}; }
std::string cudnn_conv_validate(const std::vector<int64_t>&, const std::vector<int64_t>&, const std::vector<int64_t>&,
                                const std::vector<int64_t>&, const std::vector<int64_t>&, const std::vector<int64_t>&,
                                const std::string&) {
  return "built without the CUDA backend";
}
std::string cudnn_sdpa_validate(const std::vector<int64_t>&, const std::string&, bool, const std::vector<int64_t>&, int,
                                const std::vector<int64_t>&) {
  return "built without the CUDA backend";
}
}  // namespace twinfer

