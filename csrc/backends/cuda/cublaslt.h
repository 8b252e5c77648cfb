// cuBLASLt through a table of entry points resolved with dlsym from the
// library libraries.cc opened (never linked), and the library state twinfer
// keeps per device: a handle. Only the GEMM files include this (it pulls in
// cublasLt.h from NVIDIA's wheel; see CMakeLists.txt).
#pragma once
#include <cublasLt.h>

#include "backends/cuda/build_stream.h"  // TrialBuffer

#include <functional>
#include <string>

namespace twinfer::cuda {

struct CublasLtApi {
  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtDestroy) destroy = nullptr;
  decltype(&cublasLtGetStatusString) status_string = nullptr;
  decltype(&cublasLtMatmulDescCreate) desc_create = nullptr;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) layout_create = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
  decltype(&cublasLtMatrixLayoutSetAttribute) layout_set = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
};

// The table (throws Error(kDevice) naming the library and the missing symbol).
const CublasLtApi& cublaslt();
// One handle per device, created on first use (cuBLASLt handles are safe to
// share between threads; the workspace and stream come with each call).
cublasLtHandle_t cublaslt_handle(int device);
// Throws Error(kRuntime) "what: <cuBLASLt status>" unless s is success.
void check_cublas(cublasStatus_t s, const char* what);

// cuBLASLt's best algorithm for the descriptor and layouts (C = D), with up
// to 32 MiB of workspace and every operand `align`-byte aligned; throws
// Error(kUnsupportedOp) "cuBLASLt has no algorithm for <what>" when none.
cublasLtMatmulHeuristicResult_t choose_algo(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                                            cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t d, uint32_t align,
                                            const std::string& what);
// A launch of one candidate algorithm on scratch operands: the status of
// its cublasLtMatmul on `stream`, with `workspace` of the candidate's size.
using AlgoTrial = std::function<cublasStatus_t(const cublasLtMatmulHeuristicResult_t& candidate, void* workspace,
                                               cudaStream_t stream)>;
// choose_algo, proven by a launch: cuBLASLt's candidates best first, each
// run once by `trial` on a private stream (at load time, in relaxed capture
// mode); the first whose launch succeeds. The heuristic vouches for types
// and shapes only: on an H100 (cuBLASLt 13.1) cublasLtMatmul refused the
// heuristic's FP8 choice with NOT_SUPPORTED. Throws Error(kUnsupportedOp)
// naming each refusal when no candidate runs.
// With `tune` > 1, the first `tune` candidates that run are each timed
// (the fastest of three launches) and the fastest is kept; `timings`, when
// given, gets "candidate I T ms, ..." (empty when fewer than two ran).
cublasLtMatmulHeuristicResult_t choose_working_algo(cublasLtHandle_t h, cublasLtMatmulDesc_t desc,
                                                    cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                    cublasLtMatrixLayout_t d, uint32_t align, const std::string& what,
                                                    const AlgoTrial& trial, int tune = 1,
                                                    std::string* timings = nullptr);
// How many working candidates choose_working_algo times for the GEMMs that
// tune (int8, FP8): TWINFER_CUBLASLT_TUNE, default 3; 1 takes the first.
int cublaslt_tune_candidates();
// A column-major rows x cols matrix of type t with leading dimension ld
// (throws on failure; the caller destroys it with layout_destroy).
cublasLtMatrixLayout_t make_layout(cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld);
inline constexpr size_t kCublasLtWorkspaceLimit = size_t(32) << 20;  // what the fastest Hopper kernels ask at most

}  // namespace twinfer::cuda
