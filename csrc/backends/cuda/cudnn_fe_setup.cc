#include "backends/cuda/cudnn_fe_setup.h"

#include <cstdlib>
#include <mutex>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cudnn_api.h"
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
    // Named outright: otherwise the frontend tries libcudart.so.12 first and
    // would take a CUDA 12 runtime another package loaded.
    setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", rt.path.c_str(), 0);
    cudnn_frontend::cudnn_dlhandle = dnn.handle;
  });
  if (!why.empty()) throw Error(ErrorKind::kUnsupportedOp, "cuDNN's graph API is unavailable: " + why);
}

void check_fe_build(fe::error_t e, const char* what) {
  if (e.is_good()) return;
  // Both fall back (kUnsupportedOp); only a refusal of the graph itself is
  // remembered (PlanCache): a failed CUDA call, allocation or runtime
  // compilation may not happen again.
  const bool refusal = e.get_code() == fe::error_code_t::GRAPH_NOT_SUPPORTED ||
                       e.get_code() == fe::error_code_t::ATTRIBUTE_NOT_SET ||
                       e.get_code() == fe::error_code_t::INVALID_VALUE ||
                       e.get_code() == fe::error_code_t::SHAPE_DEDUCTION_FAILED ||
                       e.get_code() == fe::error_code_t::HEURISTIC_QUERY_FAILED;
  throw Error(ErrorKind::kUnsupportedOp,
              std::string(refusal ? kFeRefusal : "cuDNN could not build it: ") + what + ": " + e.get_message());
}

void check_fe_run(fe::error_t e, const char* what) {
  if (e.is_good()) return;
  throw Error(ErrorKind::kRuntime, std::string(what) + ": " + e.get_message());
}

FeGraph::FeGraph(std::shared_ptr<fe::graph::Graph> graph, const char* what,
                 const std::function<void(fe::graph::Graph&)>& filter)
    : graph_(std::move(graph)), what_(what) {
  fe_ready();
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  handle_ = cudnn_handle(device);
  const std::string w(what);
  std::lock_guard<std::mutex> lock(cudnn_handle_mutex());
  check_fe_build(graph_->validate(), ("validate (" + w + ")").c_str());
  check_fe_build(graph_->build_operation_graph(handle_), ("build_operation_graph (" + w + ")").c_str());
  check_fe_build(graph_->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}),
                 ("create_execution_plans (" + w + ")").c_str());
  if (filter) filter(*graph_);
  check_fe_build(graph_->check_support(handle_), ("check_support (" + w + ")").c_str());
  check_fe_build(graph_->build_plans(handle_), ("build_plans (" + w + ")").c_str());
  int64_t ws = 0;
  check_fe_build(graph_->get_workspace_size(ws), ("get_workspace_size (" + w + ")").c_str());
  workspace_ = static_cast<size_t>(ws);
  if (!graph_->get_plan_name(plan_).is_good()) plan_.clear();
}

void FeGraph::execute(std::unordered_map<int64_t, void*>& pack, void* workspace, cudaStream_t s) const {
  std::lock_guard<std::mutex> lock(cudnn_handle_mutex());
  check_cudnn(cudnn().set_stream(handle_, s), "cudnnSetStream");
  fe::error_t e = graph_->execute(handle_, pack, workspace);
  if (!e.is_good()) check_fe_run(e, (std::string("cuDNN ") + what_ + " execute").c_str());  // the message only on failure
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
