#include "backends/cuda/cudnn_api.h"

#include <cuda_runtime_api.h>

#include <mutex>
#include <string>
#include <vector>

#include "backends/cuda/libraries.h"
#include "core/device_info.h"
#include "core/error.h"

namespace twinfer::cuda {

namespace {
template <typename F>
void resolve(F& fn, const char* symbol) {
  fn = reinterpret_cast<F>(library_symbol("cudnn", symbol));
  if (!fn) {
    const Library& lib = library("cudnn");
    throw Error(ErrorKind::kDevice, lib.handle ? std::string("cuDNN at ") + lib.path + " lacks " + symbol : lib.why);
  }
}
}  // namespace

const CudnnApi& cudnn() {
  static std::mutex m;
  static CudnnApi api;
  static bool ready = false;
  std::lock_guard<std::mutex> lock(m);
  if (ready) return api;
  resolve(api.create, "cudnnCreate");
  resolve(api.set_stream, "cudnnSetStream");
  resolve(api.error_string, "cudnnGetErrorString");
  resolve(api.tensor_create, "cudnnCreateTensorDescriptor");
  resolve(api.tensor_set, "cudnnSetTensorNdDescriptor");
  resolve(api.tensor_destroy, "cudnnDestroyTensorDescriptor");
  resolve(api.filter_create, "cudnnCreateFilterDescriptor");
  resolve(api.filter_set, "cudnnSetFilterNdDescriptor");
  resolve(api.filter_destroy, "cudnnDestroyFilterDescriptor");
  resolve(api.conv_create, "cudnnCreateConvolutionDescriptor");
  resolve(api.conv_set, "cudnnSetConvolutionNdDescriptor");
  resolve(api.conv_groups, "cudnnSetConvolutionGroupCount");
  resolve(api.conv_math, "cudnnSetConvolutionMathType");
  resolve(api.conv_destroy, "cudnnDestroyConvolutionDescriptor");
  resolve(api.fwd_algos, "cudnnGetConvolutionForwardAlgorithm_v7");
  resolve(api.fwd, "cudnnConvolutionForward");
  ready = true;
  return api;
}

void check_cudnn(cudnnStatus_t s, const char* what) {
  if (s == CUDNN_STATUS_SUCCESS) return;
  const char* msg = nullptr;
  try {
    msg = cudnn().error_string(s);
  } catch (...) {
  }
  throw Error(s == CUDNN_STATUS_ALLOC_FAILED ? ErrorKind::kOutOfMemory : ErrorKind::kRuntime,
              std::string(what) + ": " + (msg ? msg : "cuDNN status " + std::to_string(static_cast<int>(s))));
}

void check_cudnn_setup(cudnnStatus_t s, const char* what) {
  const int code = static_cast<int>(s);
  const bool refused = (code >= CUDNN_STATUS_BAD_PARAM && code < CUDNN_STATUS_BAD_PARAM + 1000) ||
                       (code >= CUDNN_STATUS_NOT_SUPPORTED && code < CUDNN_STATUS_NOT_SUPPORTED + 1000);
  if (!refused) return check_cudnn(s, what);
  const char* msg = nullptr;
  try {
    msg = cudnn().error_string(s);
  } catch (...) {
  }
  throw Error(ErrorKind::kUnsupportedOp, std::string("cuDNN refused it: ") + what + ": " +
                                             (msg ? msg : "status " + std::to_string(code)));
}

cudnnHandle_t cudnn_handle(int device) {
  static std::mutex m;
  static std::vector<cudnnHandle_t>* handles = new std::vector<cudnnHandle_t>();  // never destroyed
  std::lock_guard<std::mutex> lock(m);
  if (handles->size() <= static_cast<size_t>(device)) handles->resize(device + 1, nullptr);
  cudnnHandle_t& h = (*handles)[device];
  if (!h) {
    int prev = 0;
    cudaGetDevice(&prev);
    cudaSetDevice(device);
    cudnnHandle_t made = nullptr;  // kept only on success: a failed create leaves no handle behind
    const cudnnStatus_t s = cudnn().create(&made);
    cudaSetDevice(prev);
    check_cudnn(s, "cudnnCreate");
    h = made;
  }
  return h;
}

namespace {
struct SymbolCheck {
  SymbolCheck() { register_cuda_symbol_check([] { cudnn(); }); }
} symbol_check;
}  // namespace

}  // namespace twinfer::cuda
