// cuDNN's graph API through NVIDIA's header-only frontend (cudnn_frontend.h,
// from the nvidia-cudnn-frontend wheel). Only the cudnn_fe_*.cc files
// include this: the headers take ~30 s to compile, and CMakeLists.txt gives
// just those files the include paths and NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING.
// In that mode the frontend calls cuDNN through cudnn_frontend::cudnn_dlhandle,
// which fe_ready() points at the libcudnn.so.9 we opened ourselves, and the
// CUDA runtime through a libcudart.so.13 it dlopens by name, which fe_ready()
// has loaded from NVIDIA's wheel first (our own runtime is static).
#pragma once
#include <cudnn_frontend.h>

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "core/dtype.h"

namespace twinfer::cuda {

namespace fe = cudnn_frontend;

// Opens cuDNN and the CUDA runtime for the frontend; throws
// Error(kUnsupportedOp) naming what is missing, so the caller can fall back.
void fe_ready();

// An error of building a graph (validate, heuristics, support, plans) is
// Error(kUnsupportedOp) with cuDNN's message: the caller falls back. An
// error of executing one is kRuntime.
void check_fe_build(fe::error_t e, const char* what);
void check_fe_run(fe::error_t e, const char* what);

// cuDNN's enum for a twinfer float type (float32, float16, bfloat16).
fe::DataType_t fe_type(DType t);

// A graph built for the current device: validated, its plan chosen by
// heuristics A then FALLBACK (after `filter` narrows the candidates, e.g.
// no tensor cores for exact float32) and built. Building throws
// Error(kUnsupportedOp) with cuDNN's message when cuDNN refuses it.
class FeGraph {
 public:
  FeGraph(std::shared_ptr<fe::graph::Graph> graph, const char* what,
          const std::function<void(fe::graph::Graph&)>& filter = {});
  size_t workspace_bytes() const { return workspace_; }
  const std::string& plan_name() const { return plan_; }
  // Enqueues on `s` (one thread at a time: the handle takes one stream, and
  // the graph keeps per-call state). pack: uid -> device pointer.
  void execute(std::unordered_map<int64_t, void*>& pack, void* workspace, cudaStream_t s) const;

 private:
  std::shared_ptr<fe::graph::Graph> graph_;
  const char* what_;
  cudnnHandle_t handle_ = nullptr;
  size_t workspace_ = 0;
  std::string plan_;
};

}  // namespace twinfer::cuda
