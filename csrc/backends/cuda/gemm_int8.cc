#include "backends/cuda/gemm_int8.h"

#include <cstdint>
#include <mutex>

#include "backends/cuda/cublaslt.h"
#include "backends/cuda/cuda_check.h"
#include "core/error.h"

namespace twinfer::cuda {

namespace {
int current_device() {
  int d = 0;
  check(cudaGetDevice(&d), "cudaGetDevice");
  return d;
}
}  // namespace

struct Int8Gemm::State {
  Config c;
  const CublasLtApi& api;
  cublasLtHandle_t handle;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulHeuristicResult_t algo{};
  // The bias pointer lives in the descriptor: set it and enqueue under one
  // lock (contexts share the kernel).
  mutable std::mutex m;
  mutable const float* bias_set = nullptr;
  std::string timings;

  State(const Config& cfg) : c(cfg), api(cublaslt()), handle(cublaslt_handle(current_device())) {}
  ~State() {
    for (auto l : {a, b, d})
      if (l) api.layout_destroy(l);
    if (desc) api.desc_destroy(desc);
  }
  void set(cublasLtMatmulDescAttributes_t attr, const void* v, size_t n) {
    check_cublas(api.desc_set(desc, attr, v, n), "cublasLtMatmulDescSetAttribute");
  }
  // One cublasLtMatmul with `algo` (the chosen one, or a candidate on trial).
  cublasStatus_t launch(const int8_t* x, const int8_t* w, void* d, const float* alpha, const float* bias,
                        const cublasLtMatmulAlgo_t& algo, void* workspace, size_t workspace_size,
                        cudaStream_t stream) const {
    std::lock_guard<std::mutex> lock(m);
    if (c.bias && bias != bias_set) {
      check_cublas(api.desc_set(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
                   "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
      bias_set = bias;
    }
    const int32_t one = 1, zero = 0;
    const float fzero = 0.f;
    const bool i8 = c.out == Output::kInt8;
    const void* a_scale = i8 ? static_cast<const void*>(alpha) : &one;
    const void* b_scale = i8 ? static_cast<const void*>(&fzero) : &zero;
    return api.matmul(handle, desc, a_scale, w, a, x, b, b_scale, d, this->d, d, this->d, &algo, workspace,
                      workspace_size, stream);
  }
};

std::string Int8Gemm::unsupported(int64_t k, int64_t n) {
  if (k % 4 != 0) return "the int8 GEMM needs K a multiple of 4, got " + std::to_string(k);
  if (n % 4 != 0) return "the int8 GEMM needs N a multiple of 4, got " + std::to_string(n);
  return "";
}

Int8Gemm::Int8Gemm(const Config& c) : st_(std::make_unique<State>(c)) {
  const std::string why = unsupported(c.k, c.n);
  if (!why.empty()) throw Error(ErrorKind::kUnsupportedOp, why);
  State& s = *st_;
  const bool i8 = c.out == Output::kInt8;
  // int32 out: compute and scale int32; int8 out: scale float (alpha, bias float).
  check_cublas(s.api.desc_create(&s.desc, CUBLAS_COMPUTE_32I, i8 ? CUDA_R_32F : CUDA_R_32I),
               "cublasLtMatmulDescCreate(int8)");
  const cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
  s.set(CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t));
  s.set(CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof(n));
  if (i8) {
    // alpha is a device vector over D's rows (our output channels), beta a
    // host 0: the IMMA kernels on plain (non-COL32) layouts list this mode;
    // ALPHA_DEVICE_VECTOR_BETA_ZERO is documented for the COL32 orders only.
    const cublasLtPointerMode_t pm = CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST;
    s.set(CUBLASLT_MATMUL_DESC_POINTER_MODE, &pm, sizeof(pm));
    const cublasLtEpilogue_t ep = c.bias ? (c.relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                                         : (c.relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
    s.set(CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep));
    if (c.bias) {
      const cudaDataType_t bt = CUDA_R_32F;
      s.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt));
      // The heuristic reads the bias pointer's alignment: a stand-in with the
      // alignment of the real ones (our constants are 256-byte aligned).
      const void* aligned = reinterpret_cast<const void*>(uintptr_t{256});
      s.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &aligned, sizeof(aligned));
    }
  }
  // Column-major: A = w as (k x n) with ld k, read transposed; B = x as
  // (k x rows) with ld k; D = (n x rows) with ld n, i.e. d[rows, n] row-major.
  s.a = make_layout(CUDA_R_8I, c.k, c.n, c.k);
  s.b = make_layout(CUDA_R_8I, c.k, c.rows, c.k);
  s.d = make_layout(i8 ? CUDA_R_8I : CUDA_R_32I, c.n, c.rows, c.n);

  // 16: our buffers are the arena's and the kernel's own, 256-byte aligned.
  // Each candidate runs on zeroed operands (alpha 0, bias 0), and the first
  // TWINFER_CUBLASLT_TUNE that run are timed: the heuristic's first int8
  // choice is suspected slow on Hopper (docs/gpu-runs/2026-11-30-b56c98f.md).
  // Without memory for the trial operands (a batch-256 im2col is hundreds of
  // MB), the heuristic's first choice as before.
  const std::string what = "int8 " + std::to_string(c.rows) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) +
                           (i8 ? " with int8 output" : " with int32 output");
  try {
    const TrialBuffer x(static_cast<size_t>(c.rows * c.k)), w(static_cast<size_t>(c.n * c.k)),
        d(static_cast<size_t>(c.rows * c.n) * (i8 ? 1 : 4)), vectors(static_cast<size_t>(c.n) * sizeof(float));
    const float* trial_vector = static_cast<const float*>(vectors.get());
    s.algo = choose_working_algo(
        s.handle, s.desc, s.a, s.b, s.d, 16, what,
        [&](const cublasLtMatmulHeuristicResult_t& r, void* workspace, cudaStream_t stream) {
          return s.launch(static_cast<const int8_t*>(x.get()), static_cast<const int8_t*>(w.get()), d.get(),
                          trial_vector, c.bias ? trial_vector : nullptr, r.algo, workspace, r.workspaceSize, stream);
        },
        cublaslt_tune_candidates(), &s.timings);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kOutOfMemory) throw;
    cudaGetLastError();
    s.timings.clear();
    s.algo = choose_algo(s.handle, s.desc, s.a, s.b, s.d, 16, what);
  }
  s.bias_set = nullptr;  // the trials' bias vector is freed: the first run sets the layer's own
}

Int8Gemm::~Int8Gemm() = default;

size_t Int8Gemm::workspace_bytes() const { return st_->algo.workspaceSize; }
const std::string& Int8Gemm::timings() const { return st_->timings; }

void Int8Gemm::run(const int8_t* x, const int8_t* w, void* d, const float* alpha, const float* bias, void* workspace,
                   cudaStream_t stream) const {
  check_cublas(st_->launch(x, w, d, alpha, bias, st_->algo.algo, workspace, st_->algo.workspaceSize, stream),
               "cublasLtMatmul(int8)");
}

}  // namespace twinfer::cuda
