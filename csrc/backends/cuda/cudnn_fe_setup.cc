#include "backends/cuda/cudnn_fe_setup.h"

#include <mutex>

#include "backends/cuda/libraries.h"
#include "core/device_info.h"
#include "core/error.h"

// The frontend's dynamic-loading mode reads cuDNN's symbols from this handle.
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}

namespace twinfer::cuda {

void fe_ready() {
  static std::once_flag once;
  static std::string why;  // empty: ready
  std::call_once(once, [] {
    const Library& dnn = library("cudnn");
    if (!dnn.handle) {
      why = dnn.why;
      return;
    }
    // The frontend dlopens "libcudart.so.13" by name, which finds this copy
    // once it is loaded (the dynamic loader matches the soname); a user's
    // CUDNN_FRONTEND_CUDART_LIB_NAME still wins.
    const Library& rt = library("cudart");
    if (!rt.handle) {
      why = rt.why;
      return;
    }
    cudnn_frontend::cudnn_dlhandle = dnn.handle;
  });
  if (!why.empty()) throw Error(ErrorKind::kUnsupportedOp, "cuDNN's graph API is unavailable: " + why);
}

void check_fe_build(fe::error_t e, const char* what) {
  if (e.is_good()) return;
  throw Error(ErrorKind::kUnsupportedOp, std::string("cuDNN refused it: ") + what + ": " + e.get_message());
}

void check_fe_run(fe::error_t e, const char* what) {
  if (e.is_good()) return;
  throw Error(ErrorKind::kRuntime, std::string(what) + ": " + e.get_message());
}

fe::DataType_t fe_type(DType t) {
  switch (t) {
    case DType::kFloat32: return fe::DataType_t::FLOAT;
    case DType::kFloat16: return fe::DataType_t::HALF;
    case DType::kBFloat16: return fe::DataType_t::BFLOAT16;
    default: throw Error(ErrorKind::kUnsupportedOp, std::string("cuDNN graphs here take float types, not ") + dtype_name(t));
  }
}

}  // namespace twinfer::cuda

namespace twinfer {
std::string cudnn_frontend_version() {
  return std::to_string(CUDNN_FRONTEND_MAJOR_VERSION) + "." + std::to_string(CUDNN_FRONTEND_MINOR_VERSION) + "." +
         std::to_string(CUDNN_FRONTEND_PATCH_VERSION);
}
}  // namespace twinfer
