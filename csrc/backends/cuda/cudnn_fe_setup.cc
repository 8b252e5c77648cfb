#include "backends/cuda/cudnn_fe_setup.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <mutex>

#include "backends/cuda/build_stream.h"
#include "backends/cuda/capture_mode.h"
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
                 const std::function<void(fe::graph::Graph&)>& filter, bool by_index)
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
  if (!by_index) {
    // The frontend's own choice (build_plans may also pick its open-source
    // SDPA engine, which only a plain execute runs).
    check_fe_build(graph_->build_plans(handle_), ("build_plans (" + w + ")").c_str());
    int64_t ws = 0;
    check_fe_build(graph_->get_workspace_size(ws), ("get_workspace_size (" + w + ")").c_str());
    workspace_ = static_cast<size_t>(ws);
    if (!graph_->get_plan_name(plan_).is_good()) plan_.clear();
    return;
  }
  // By index: the heuristics' choice is the first candidate that builds (as
  // build_plans' HEURISTICS_CHOICE takes it), and every execute names its
  // plan, since building another one (tune) moves the frontend's own
  // "candidate", which a plain execute would run.
  fe::error_t last{fe::error_code_t::GRAPH_NOT_SUPPORTED, "no execution plan"};
  const int64_t count = graph_->get_execution_plan_count();
  for (int64_t i = 0; i < count && plan_index_ < 0; ++i) {
    last = graph_->build_plan_at_index(handle_, i);
    if (last.is_good()) plan_index_ = i;
  }
  if (plan_index_ < 0) check_fe_build(last, ("build_plans (" + w + ")").c_str());
  // A plan is built, so this builds none: it prepares the variant pack.
  check_fe_build(graph_->build_plans(handle_), ("build_plans (" + w + ")").c_str());
  int64_t ws = 0;
  check_fe_build(graph_->get_workspace_size_plan_at_index(plan_index_, ws), ("get_workspace_size (" + w + ")").c_str());
  workspace_ = static_cast<size_t>(ws);
  if (!graph_->get_plan_name_at_index(plan_index_, plan_).is_good()) plan_.clear();
}

void FeGraph::execute(std::unordered_map<int64_t, void*>& pack, void* workspace, cudaStream_t s) const {
  std::lock_guard<std::mutex> lock(cudnn_handle_mutex());
  check_cudnn(cudnn().set_stream(handle_, s), "cudnnSetStream");
  fe::error_t e = plan_index_ >= 0 ? graph_->execute_plan_at_index(handle_, pack, workspace, plan_index_)
                                   : graph_->execute(handle_, pack, workspace);
  if (!e.is_good()) check_fe_run(e, (std::string("cuDNN ") + what_ + " execute").c_str());  // the message only on failure
}

int cudnn_tune_candidates() {
  static const int n = [] {
    const char* v = std::getenv("TWINFER_CUDNN_TUNE");
    return v && *v ? std::atoi(v) : 3;
  }();
  return n;
}

void FeGraph::tune(const std::vector<std::pair<int64_t, size_t>>& operands, int candidates) {
  const int64_t count = graph_->get_execution_plan_count();
  if (candidates < 2 || count < 2 || plan_index_ < 0) return;  // only graphs built by index
  // As the cuBLASLt trials (cublaslt.cc): real launches from the thread that
  // builds the plan, kept apart from another thread's capture, in relaxed mode.
  std::lock_guard<std::mutex> lock(cudnn_handle_mutex());
  RelaxedCaptureScope relaxed;
  // The heuristics' plan and the next ones in their order that build (the
  // filter's exclusions fail at once) and need no runtime compilation
  // (NVRTC takes seconds a plan, under this lock).
  std::vector<int64_t> built{plan_index_};
  size_t most = workspace_;
  for (int64_t i = 0; i < count && static_cast<int>(built.size()) < candidates; ++i) {
    if (i == plan_index_) continue;
    std::vector<fe::BehaviorNote_t> notes;
    if (!graph_->get_behavior_notes_for_plan_at_index(i, notes).is_good()) continue;
    bool compiles = false;
    for (auto n : notes) compiles = compiles || n == fe::BehaviorNote_t::RUNTIME_COMPILATION;
    int64_t ws = 0;
    if (compiles || !graph_->build_plan_at_index(handle_, i).is_good() ||
        !graph_->get_workspace_size_plan_at_index(i, ws).is_good())
      continue;
    built.push_back(i);
    most = std::max(most, static_cast<size_t>(ws));
  }
  if (built.size() < 2) return;
  // A trial that fails for want of memory (the operands of a batch-256
  // layer are hundreds of MB, on a GPU torch shares) leaves the heuristics'
  // plan; any other CUDA error is a fault and is raised.
  auto failed = [&](const char* where) {
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess && e != cudaErrorMemoryAllocation)
      throw Error(ErrorKind::kRuntime,
                  std::string("cuDNN tuning (") + what_ + ", " + where + "): " + cudaGetErrorString(e));
  };
  try {
    std::vector<std::unique_ptr<TrialBuffer>> buffers;
    std::unordered_map<int64_t, void*> pack;
    for (const auto& [uid, bytes] : operands) {
      buffers.push_back(std::make_unique<TrialBuffer>(bytes));
      pack[uid] = buffers.back()->get();
    }
    TrialBuffer workspace(most);
    TrialClock clock;
    check_cudnn(cudnn().set_stream(handle_, clock.stream), "cudnnSetStream (cuDNN tuning)");
    float best = std::numeric_limits<float>::infinity();
    int64_t chosen = -1;
    std::string log;
    for (int64_t i : built) {
      // One run to load and warm the engine, then the fastest of three.
      if (!graph_->execute_plan_at_index(handle_, pack, workspace.get(), i).is_good() ||
          cudaStreamSynchronize(clock.stream) != cudaSuccess) {
        failed("a warm-up run");
        continue;
      }
      float fastest = std::numeric_limits<float>::infinity();
      for (int r = 0; r < 3; ++r) {
        cudaEventRecord(clock.start, clock.stream);
        const bool ran = graph_->execute_plan_at_index(handle_, pack, workspace.get(), i).is_good();
        cudaEventRecord(clock.stop, clock.stream);
        float ms = 0.f;
        if (!ran || cudaEventSynchronize(clock.stop) != cudaSuccess ||
            cudaEventElapsedTime(&ms, clock.start, clock.stop) != cudaSuccess) {
          failed("a timed run");
          fastest = std::numeric_limits<float>::infinity();
          break;
        }
        fastest = std::min(fastest, ms);
      }
      std::string name;
      if (!graph_->get_plan_name_at_index(i, name).is_good()) name = "plan " + std::to_string(i);
      char ms_text[32];
      std::snprintf(ms_text, sizeof ms_text, " %.3f ms", fastest);
      log += (log.empty() ? "" : ", ") + name + ms_text;
      if (fastest < best) best = fastest, chosen = i;
    }
    cudnn().set_stream(handle_, nullptr);  // not left on the trial's stream, destroyed next
    int64_t ws = 0;
    if (chosen < 0 || !graph_->get_workspace_size_plan_at_index(chosen, ws).is_good()) return;
    plan_index_ = chosen;
    workspace_ = static_cast<size_t>(ws);
    if (!graph_->get_plan_name_at_index(chosen, plan_).is_good()) plan_ = "plan " + std::to_string(chosen);
    tuning_ = log;
  } catch (const Error& e) {
    cudnn().set_stream(handle_, nullptr);
    if (e.kind() != ErrorKind::kOutOfMemory) throw;
    cudaGetLastError();  // no memory for the trial's operands: the heuristics' plan stays
  } catch (const std::bad_alloc&) {
    cudnn().set_stream(handle_, nullptr);
  }
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
