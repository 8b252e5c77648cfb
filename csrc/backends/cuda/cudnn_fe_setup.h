// cuDNN's graph API through NVIDIA's header-only frontend (cudnn_frontend.h,
// from the nvidia-cudnn-frontend wheel). Only the cudnn_fe_*.cc files
// include this: the headers take ~30 s to compile, and CMakeLists.txt gives
// just those files the include paths and NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING.
// In that mode the frontend calls cuDNN through cudnn_frontend::cudnn_dlhandle,
// which fe_ready() points at the libcudnn.so.9 we opened ourselves, and the
// CUDA runtime through a libcudart.so.13 it dlopens by name, which fe_ready()
// has loaded from NVIDIA's wheel first (our own runtime is static).
#pragma once
#include <cstdio>
#include <deque>
#include <cudnn_frontend.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace twinfer::cuda {

namespace fe = cudnn_frontend;

// Opens cuDNN and the CUDA runtime for the frontend; throws
// Error(kUnsupportedOp) naming what is missing, so the caller can fall back.
void fe_ready();

// An error of building a graph (validate, heuristics, support, plans) is
// Error(kUnsupportedOp) with cuDNN's message: the caller falls back. An
// error of executing one is kRuntime.
void check_fe_build(fe::error_t e, const char* what);
// How check_fe_build's message starts when cuDNN refuses the graph itself.
inline constexpr const char* kFeRefusal = "cuDNN refused it: ";
void check_fe_run(fe::error_t e, const char* what);

// cuDNN's enum for a twinfer float type (float32, float16, bfloat16).
fe::DataType_t fe_type(DType t);

// A graph built for the current device: validated, its plan chosen by
// heuristics A then FALLBACK (after `filter` narrows the candidates, e.g.
// no tensor cores for exact float32) and built. Building throws
// Error(kUnsupportedOp) with cuDNN's message when cuDNN refuses it.
class FeGraph {
 public:
  // by_index: the plan chosen and run by its index (what tune() needs;
  // convolutions), else the frontend's own build_plans / execute (attention,
  // which may take the frontend's open-source SDPA engine).
  FeGraph(std::shared_ptr<fe::graph::Graph> graph, const char* what,
          const std::function<void(fe::graph::Graph&)>& filter = {}, bool by_index = false);
  size_t workspace_bytes() const { return workspace_; }
  const std::string& plan_name() const { return plan_; }
  // Enqueues on `s` (one thread at a time: the handle takes one stream, and
  // the graph keeps per-call state). pack: uid -> device pointer.
  void execute(std::unordered_map<int64_t, void*>& pack, void* workspace, cudaStream_t s) const;

  // For a graph built by_index: times the heuristics' plan and the next
  // `candidates` - 1 in their order that build without runtime compilation,
  // on zeroed operands of the given sizes (uid -> bytes), and keeps the
  // fastest, as TensorRT times its tactics: cuDNN 9.19's first choice was
  // 10x slower than another engine for MobileNetV2's ReLU6 convolutions on
  // an H200. A plan that does not build or run, or no memory for the
  // operands, keeps the heuristics' choice; a CUDA fault in a trial is
  // raised. Timing noise can make two processes choose differently (their
  // results may differ in the last bits), as TensorRT's builds can. See
  // cudnn_tune_candidates().
  void tune(const std::vector<std::pair<int64_t, size_t>>& operands, int candidates);
  // The plans timed by tune(), as "name ms" (empty: not tuned).
  const std::string& tuning() const { return tuning_; }

 private:
  std::shared_ptr<fe::graph::Graph> graph_;
  const char* what_;
  cudnnHandle_t handle_ = nullptr;
  size_t workspace_ = 0;
  std::string plan_;
  // by_index: the plan every execute runs (the heuristics' or tune()'s);
  // -1: the frontend's own choice.
  int64_t plan_index_ = -1;
  std::string tuning_;
};

// How many of the heuristics' plans a convolution graph times when it is
// built: TWINFER_CUDNN_TUNE (0 or 1: none, the heuristics' first choice as
// it is), default 3.
int cudnn_tune_candidates();

// make()'s plan, or null with the reason appended to *reason when cuDNN
// refuses it (Error kUnsupportedOp, or the frontend's own exception: a
// missing symbol or library); other errors (out of memory, a device fault)
// propagate.
template <typename Plan, typename Make>
std::shared_ptr<const Plan> try_build(const Make& make, std::string* reason) {
  auto add = [&](const std::string& w) { *reason += (reason->empty() ? "" : "; then ") + w; };
  try {
    fe_ready();  // before any graph: the frontend caches the cuDNN symbols it first looks up
    return make();
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kUnsupportedOp) throw;
    add(e.what());
  } catch (const std::exception& e) {
    add(std::string("cuDNN frontend: ") + e.what());
  }
  return nullptr;
}

// Whether every attempt try_build made ("a; then b") was cuDNN refusing the
// graph: a cache remembers only those, so an allocation or compilation that
// failed once is tried again.
inline bool all_refusals(const std::string& reason) {
  const std::string sep = "; then ";
  for (size_t at = 0;;) {
    if (reason.compare(at, std::string(kFeRefusal).size(), kFeRefusal) != 0) return false;
    const size_t next = reason.find(sep, at);
    if (next == std::string::npos) return true;
    at = next + sep.size();
  }
}

// A float in a plan cache key: its exact value (hexadecimal), so two specs
// whose scale or activation parameter differ in the last bit get two plans.
inline std::string exact_key(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%a", x);
  return buf;
}

// Plans shared by the kernels of one spec on one device (BERT's twelve
// layers build one attention plan; ResNet's repeated convolutions one
// each), held as long as a kernel holds them (the last 64 built, longer);
// refusals are remembered, so a refused spec is not built again. `key`
// names the spec; the device is added here.
template <typename Plan>
class PlanCache {
 public:
  using Build = std::function<std::shared_ptr<const Plan>(std::string* why)>;
  std::shared_ptr<const Plan> get(std::string key, const Build& build, std::string* why) {
    int device = 0;
    cudaGetDevice(&device);
    key += "@" + std::to_string(device);
    std::lock_guard<std::mutex> lock(mutex_);
    auto r = refused_.find(key);
    if (r != refused_.end()) {
      if (why) *why = r->second;
      return nullptr;
    }
    auto it = plans_.find(key);
    if (it != plans_.end())
      if (auto p = it->second.lock()) return p;
    std::string reason;
    std::shared_ptr<const Plan> p = build(&reason);
    if (p) {
      plans_[key] = p;
      // The last few plans outlive their kernels: a model loaded again (a
      // test, a server reloading a version) finds them instead of compiling
      // cuDNN's runtime-fused kernels again, which takes seconds each.
      recent_.push_back(p);
      if (recent_.size() > kRecent) recent_.pop_front();
    } else {
      if (all_refusals(reason)) refused_[key] = reason;  // not a passing failure
      if (why) *why = reason;
    }
    return p;
  }

 private:
  std::mutex mutex_;
  static constexpr size_t kRecent = 64;
  std::map<std::string, std::weak_ptr<const Plan>> plans_;
  std::deque<std::shared_ptr<const Plan>> recent_;
  std::map<std::string, std::string> refused_;
};

}  // namespace twinfer::cuda
