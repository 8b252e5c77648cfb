// cuBLASLt and cuDNN, opened on first use with dlopen from the paths Python
// found in NVIDIA's wheels (never linked: `import twinfer` works without
// them, a GPU or a driver; the static CUDA runtime loads the driver lazily).
// Kernels of the CUDA-kernels issue resolve their functions through
// library_symbol(); today only the version calls are used (build_info).
#pragma once
#include <mutex>
#include <string>

namespace twinfer::cuda {

struct Library {
  void* handle = nullptr;  // null: not found (why says so)
  std::string path;
  std::string why;
};

// Opens `name` ("cublasLt", "cudnn", "cupti" or "cudart") once; later calls
// return the same. twinfer's own CUDA runtime is static: the shared
// "cudart" is opened only for cuDNN's frontend (cudnn_fe_setup.cc).
const Library& library(const std::string& name);
// A symbol of an opened library, or nullptr.
void* library_symbol(const std::string& name, const char* symbol);

// Held while cuDNN's handle is in use (it takes one stream at a time and is
// not for two threads at once: callers hold it while they set the stream and
// enqueue, and while they query heuristics) and while a stream capture
// begins or ends (cuda_device.cc says why). Here, not in cudnn_api.h: a
// build without cuDNN's header still captures.
std::mutex& cudnn_handle_mutex();

}  // namespace twinfer::cuda
