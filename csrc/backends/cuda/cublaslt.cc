#include "backends/cuda/cublaslt.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <vector>

#include "backends/cuda/build_stream.h"
#include "backends/cuda/capture_mode.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/libraries.h"
#include "core/device_info.h"
#include "core/error.h"

namespace twinfer::cuda {

namespace {

template <typename F>
void resolve(F& fn, const char* symbol) {
  fn = reinterpret_cast<F>(library_symbol("cublasLt", symbol));
  if (!fn) {
    const Library& lib = library("cublasLt");
    throw Error(ErrorKind::kDevice, lib.handle ? std::string("cuBLASLt at ") + lib.path + " lacks " + symbol
                                               : lib.why);
  }
}

}  // namespace

const CublasLtApi& cublaslt() {
  static std::mutex m;
  static CublasLtApi api;
  static bool ready = false;
  std::lock_guard<std::mutex> lock(m);
  if (ready) return api;
  resolve(api.create, "cublasLtCreate");
  resolve(api.destroy, "cublasLtDestroy");
  resolve(api.status_string, "cublasLtGetStatusString");
  resolve(api.desc_create, "cublasLtMatmulDescCreate");
  resolve(api.desc_destroy, "cublasLtMatmulDescDestroy");
  resolve(api.desc_set, "cublasLtMatmulDescSetAttribute");
  resolve(api.layout_create, "cublasLtMatrixLayoutCreate");
  resolve(api.layout_destroy, "cublasLtMatrixLayoutDestroy");
  resolve(api.layout_set, "cublasLtMatrixLayoutSetAttribute");
  resolve(api.pref_create, "cublasLtMatmulPreferenceCreate");
  resolve(api.pref_destroy, "cublasLtMatmulPreferenceDestroy");
  resolve(api.pref_set, "cublasLtMatmulPreferenceSetAttribute");
  resolve(api.heuristic, "cublasLtMatmulAlgoGetHeuristic");
  resolve(api.matmul, "cublasLtMatmul");
  ready = true;
  return api;
}

void check_cublas(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  const char* msg = nullptr;
  try {
    msg = cublaslt().status_string(s);
  } catch (...) {
  }
  throw Error(s == CUBLAS_STATUS_ALLOC_FAILED ? ErrorKind::kOutOfMemory : ErrorKind::kRuntime,
              std::string(what) + ": " + (msg ? msg : "cuBLASLt status " + std::to_string(static_cast<int>(s))));
}

namespace {

// Up to kCublasLtWorkspaceLimit of workspace, every operand `align`-byte aligned.
cublasLtMatmulPreference_t preference(uint32_t align) {
  const CublasLtApi& api = cublaslt();
  cublasLtMatmulPreference_t pref = nullptr;
  check_cublas(api.pref_create(&pref), "cublasLtMatmulPreferenceCreate");
  const uint64_t ws = kCublasLtWorkspaceLimit;
  api.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    api.pref_set(pref, attr, &align, sizeof(align));
  return pref;
}

}  // namespace

cublasLtMatmulHeuristicResult_t choose_algo(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                                            cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t d, uint32_t align,
                                            const std::string& what) {
  const CublasLtApi& api = cublaslt();
  cublasLtMatmulPreference_t pref = preference(align);
  cublasLtMatmulHeuristicResult_t r{};
  int found = 0;
  const cublasStatus_t s = api.heuristic(h, desc, a, b, d, d, pref, 1, &r, &found);
  api.pref_destroy(pref);
  if (s != CUBLAS_STATUS_SUCCESS || found == 0 || r.state != CUBLAS_STATUS_SUCCESS)
    throw Error(ErrorKind::kUnsupportedOp, "cuBLASLt has no algorithm for " + what +
                                               " (CUBLASLT_LOG_LEVEL=5 names what it refused)");
  return r;
}

int cublaslt_tune_candidates() {
  static const int n = [] {
    const char* v = std::getenv("TWINFER_CUBLASLT_TUNE");
    return v && *v ? std::atoi(v) : 3;
  }();
  return n;
}

cublasLtMatmulHeuristicResult_t choose_working_algo(cublasLtHandle_t h, cublasLtMatmulDesc_t desc,
                                                    cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                    cublasLtMatrixLayout_t d, uint32_t align, const std::string& what,
                                                    const AlgoTrial& trial, int tune, std::string* timings) {
  const CublasLtApi& api = cublaslt();
  cublasLtMatmulPreference_t pref = preference(align);
  constexpr int kCandidates = 8;
  cublasLtMatmulHeuristicResult_t r[kCandidates] = {};
  int found = 0;
  const cublasStatus_t s = api.heuristic(h, desc, a, b, d, d, pref, kCandidates, r, &found);
  api.pref_destroy(pref);
  if (s != CUBLAS_STATUS_SUCCESS || found == 0)
    throw Error(ErrorKind::kUnsupportedOp, "cuBLASLt has no algorithm for " + what +
                                               " (CUBLASLT_LOG_LEVEL=5 names what it refused)");
  RelaxedCaptureScope relaxed;
  size_t most = 0;
  for (int i = 0; i < found; ++i) most = std::max(most, r[i].workspaceSize);
  TrialBuffer workspace(most);
  const TrialClock clock;
  const int timed_at_most = std::max(tune, 1);
  std::string refused, log;
  int chosen = -1, working = 0;
  float best = std::numeric_limits<float>::infinity();
  // The trials launch real GEMMs (and load cuBLASLt's modules lazily) from
  // whatever thread builds the plan: kept apart from another thread's
  // capture beginning or ending, under the lock those take (cuda_device.cc:
  // cuDNN work on another thread during cuStreamEndCapture crashed the
  // driver on an H100; whether cuBLASLt's can is not known, and a trial is
  // plan-build work, where the wait costs nothing a run sees).
  std::lock_guard<std::mutex> apart_from_captures(cudnn_handle_mutex());
  for (int i = 0; i < found && working < timed_at_most; ++i) {
    if (r[i].state != CUBLAS_STATUS_SUCCESS) continue;
    const cublasStatus_t st = trial(r[i], workspace.get(), clock.stream);
    const cudaError_t ce = cudaStreamSynchronize(clock.stream);
    if (st != CUBLAS_STATUS_SUCCESS || ce != cudaSuccess) {
      cudaGetLastError();
      const char* msg = st != CUBLAS_STATUS_SUCCESS ? api.status_string(st) : cudaGetErrorString(ce);
      refused += (refused.empty() ? "" : "; ") + std::string("candidate ") + std::to_string(i) + ": " + msg;
      continue;
    }
    if (timed_at_most == 1) {
      chosen = i;
      break;
    }
    // Tuning: the heuristic's order is not the fastest for every shape (its
    // first int8 choice on Hopper is suspected slow; docs/gpu-runs): the
    // fastest of three timed launches of each of the first `tune` that run.
    float fastest = std::numeric_limits<float>::infinity();
    for (int rep = 0; rep < 3; ++rep) {
      float ms = 0.f;
      cudaEventRecord(clock.start, clock.stream);
      const cublasStatus_t again = trial(r[i], workspace.get(), clock.stream);
      cudaEventRecord(clock.stop, clock.stream);
      if (again != CUBLAS_STATUS_SUCCESS || cudaEventSynchronize(clock.stop) != cudaSuccess ||
          cudaEventElapsedTime(&ms, clock.start, clock.stop) != cudaSuccess) {
        cudaGetLastError();
        fastest = std::numeric_limits<float>::infinity();
        break;
      }
      fastest = std::min(fastest, ms);
    }
    if (fastest == std::numeric_limits<float>::infinity()) {  // ran once, then failed: not a candidate
      refused += (refused.empty() ? "" : "; ") + std::string("candidate ") + std::to_string(i) + ": failed when timed";
      continue;
    }
    ++working;
    char text[48];
    std::snprintf(text, sizeof text, "candidate %d %.3f ms", i, fastest);
    log += (log.empty() ? "" : ", ") + std::string(text);
    if (chosen < 0 || fastest < best) best = fastest, chosen = i;
  }
  if (chosen < 0)
    throw Error(ErrorKind::kUnsupportedOp, "cuBLASLt refused every algorithm its heuristic offered for " + what +
                                               " (" + refused + ")");
  if (timings) *timings = working > 1 ? log : "";
  return r[chosen];
}

cublasLtMatrixLayout_t make_layout(cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld) {
  cublasLtMatrixLayout_t l = nullptr;
  check_cublas(cublaslt().layout_create(&l, t, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld),
               "cublasLtMatrixLayoutCreate");
  return l;
}

cublasLtHandle_t cublaslt_handle(int device) {
  static std::mutex m;
  static std::vector<cublasLtHandle_t>* handles = new std::vector<cublasLtHandle_t>();  // never destroyed
  std::lock_guard<std::mutex> lock(m);
  if (device < 0) throw Error(ErrorKind::kDevice, "no CUDA device " + std::to_string(device));
  if (handles->size() <= static_cast<size_t>(device)) handles->resize(device + 1, nullptr);
  cublasLtHandle_t& h = (*handles)[device];
  if (!h) {
    int prev = 0;
    cudaGetDevice(&prev);
    cudaSetDevice(device);
    const cublasStatus_t s = cublaslt().create(&h);
    cudaSetDevice(prev);
    check_cublas(s, "cublasLtCreate");
  }
  return h;
}

namespace {
struct SymbolCheck {
  SymbolCheck() { register_cuda_symbol_check([] { cublaslt(); }); }
} symbol_check;
}  // namespace

}  // namespace twinfer::cuda
