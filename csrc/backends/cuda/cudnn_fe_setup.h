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

#include <string>

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

}  // namespace twinfer::cuda
