// MatMul and Gemm (and their fused com.twinfer forms) on cuBLASLt. The row-
// major problem becomes a column-major cuBLASLt call (ops/nn/colmajor_gemm.h,
// tested on the CPU); the descriptors and the algorithm are made when the plan
// is built (one algorithm for 16-byte aligned pointers, one for any), so a run
// only sets pointers and enqueues: capturable into a CUDA graph. On a stream
// of a green context (sm_share) the descriptor is told the partition's SM
// count, and its algorithm chosen for it, the first time. Bias and
// ReLU ride on cuBLASLt's epilogue; other activations run after it
// (gemm_epilogue.cu). float32 computes in exact fp32 (CUBLAS_COMPUTE_32F, no
// TF32) unless precision="tf32"; float16 / bfloat16 accumulate in fp32.
#include <cuda_runtime_api.h>

#include <array>
#include <memory>
#include <mutex>
#include <vector>

#include "backends/cuda/cublaslt.h"
#include "backends/cuda/gemm_epilogue.h"
#include "backends/cuda/kernel_util.h"
#include "graph/domains.h"
#include "ops/nn/colmajor_gemm.h"
#include "ops/nn/matmul.h"

namespace twinfer::cuda {

namespace {

bool cuda_float(DType t, cudaDataType_t* out) {
  switch (t) {
    case DType::kFloat32: *out = CUDA_R_32F; return true;
    case DType::kFloat16: *out = CUDA_R_16F; return true;
    case DType::kBFloat16: *out = CUDA_R_16BF; return true;
    default: return false;
  }
}

int current_device() {
  int d = 0;
  check(cudaGetDevice(&d), "cudaGetDevice");
  return d;
}

// One configured cuBLASLt matmul (D = alpha * op(X) op(W) + beta * C; C is
// D, or another matrix laid out as D: a fused MatMul's residual).
class LtMatmul {
 public:
  struct Config {
    cudaDataType_t type = CUDA_R_32F;
    // Exact fp32 by default; precision="tf32" lets float32 use TF32 tensor cores.
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    nn::ColMajorGemm g;
    int batch = 1;
    int64_t stride_x = 0, stride_w = 0, stride_d = 0;  // elements; 0: the operand is shared by every batch
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    float alpha = 1.f, beta = 0.f;
    size_t elem_bytes = 4;
  };

  explicit LtMatmul(const Config& c) : c_(c), api_(cublaslt()), handle_(cublaslt_handle(current_device())) {
    x_ = layout(c.g.x.rows, c.g.x.cols, c.g.x.ld, c.stride_x);
    w_ = layout(c.g.w.rows, c.g.w.cols, c.g.w.ld, c.stride_w);
    d_ = layout(c.g.m, c.g.n, c.g.ld_d, c.stride_d);
    variants_.push_back(make_variant(0));
    for (const auto& r : variants_[0]->algos) workspace_ = std::max(workspace_, r.workspaceSize);
  }

  ~LtMatmul() {
    for (auto l : {x_, w_, d_})
      if (l) api_.layout_destroy(l);
    for (auto& v : variants_)
      if (v->desc) api_.desc_destroy(v->desc);
  }
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;

  size_t workspace_bytes() const { return workspace_; }
  bool has_bias() const {
    return c_.epilogue == CUBLASLT_EPILOGUE_BIAS || c_.epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
  }

  // `sm_count`: the SMs of the stream's partition (0: the whole device).
  // `c`: C, laid out as D (with beta); null: C = D.
  void run(const void* x, const void* w, void* d, const void* bias, void* workspace, cudaStream_t s,
           int sm_count = 0, const void* c = nullptr) const {
    const bool aligned = is_aligned(x) && is_aligned(w) && is_aligned(d) && (!bias || is_aligned(bias)) &&
                         (!c || is_aligned(c));
    // The bias pointer is an attribute of the shared descriptor: set it and
    // enqueue under one lock (several contexts may run this kernel at once).
    std::lock_guard<std::mutex> lock(mutex_);
    Variant& v = variant(sm_count);
    const cublasLtMatmulHeuristicResult_t& r = v.algos[aligned ? 0 : 1];
    if (has_bias() && bias != v.bias_set) {
      check_cublas(api_.desc_set(v.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
                   "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
      v.bias_set = bias;
    }
    // A partition's algorithm may want more workspace than the plan gave: the
    // whole-device one (which fits) runs then.
    const cublasLtMatmulHeuristicResult_t& use = r.workspaceSize <= workspace_ ? r : variants_[0]->algos[aligned ? 0 : 1];
    check_cublas(api_.matmul(handle_, v.desc, &c_.alpha, x, x_, w, w_, &c_.beta, c ? c : d, d_, d, d_, &use.algo,
                             workspace, use.workspaceSize, s),
                 "cublasLtMatmul");
  }

 private:
  // The descriptor and algorithms for one SM count: cuBLASLt sizes its grid
  // for the SMs a green context leaves the stream (SM_COUNT_TARGET).
  struct Variant {
    int sm_count = 0;
    cublasLtMatmulDesc_t desc = nullptr;
    std::array<cublasLtMatmulHeuristicResult_t, 2> algos{};  // 16-byte aligned operands, element-aligned ones
    const void* bias_set = nullptr;
  };

  std::unique_ptr<Variant> make_variant(int sm_count) const {
    auto v = std::make_unique<Variant>();
    v->sm_count = sm_count;
    check_cublas(api_.desc_create(&v->desc, c_.compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
    try {
      const cublasOperation_t tx = c_.g.x.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
      const cublasOperation_t tw = c_.g.w.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
      set_desc(v->desc, CUBLASLT_MATMUL_DESC_TRANSA, &tx, sizeof(tx));
      set_desc(v->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tw, sizeof(tw));
      set_desc(v->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &c_.epilogue, sizeof(c_.epilogue));
      if (has_bias()) set_desc(v->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &c_.type, sizeof(c_.type));
      if (sm_count > 0) {
        const int32_t n = sm_count;
        set_desc(v->desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &n, sizeof(n));
      }
      for (int k = 0; k < 2; ++k) {
        const uint32_t align = k == 0 ? 16u : static_cast<uint32_t>(c_.elem_bytes);
        if (has_bias()) {
          // The heuristic reads the bias pointer's alignment: a stand-in with
          // the alignment this algorithm is for (run sets the real one; run
          // only checks 16 bytes, so no more may be promised here).
          const void* stand_in = reinterpret_cast<const void*>(uintptr_t{align});
          set_desc(v->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &stand_in, sizeof(stand_in));
        }
        v->algos[k] = heuristic(v->desc, align);
      }
    } catch (...) {
      api_.desc_destroy(v->desc);
      throw;
    }
    return v;
  }

  // Under mutex_.
  Variant& variant(int sm_count) const {
    for (auto& v : variants_)
      if (v->sm_count == sm_count) return *v;
    variants_.push_back(make_variant(sm_count));
    return *variants_.back();
  }

  static bool is_aligned(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

  void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t a, const void* v, size_t n) const {
    check_cublas(api_.desc_set(desc, a, v, n), "cublasLtMatmulDescSetAttribute");
  }

  cublasLtMatrixLayout_t layout(int64_t rows, int64_t cols, int64_t ld, int64_t stride) {
    cublasLtMatrixLayout_t l = nullptr;
    check_cublas(api_.layout_create(&l, c_.type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld),
                 "cublasLtMatrixLayoutCreate");
    if (c_.batch > 1) {
      const int32_t count = c_.batch;
      check_cublas(api_.layout_set(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)),
                   "cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)");
      check_cublas(api_.layout_set(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)),
                   "cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)");
    }
    return l;
  }

  cublasLtMatmulHeuristicResult_t heuristic(cublasLtMatmulDesc_t desc, uint32_t align) const {
    return choose_algo(handle_, desc, x_, w_, d_, align,
                       "this GEMM (" + std::to_string(c_.g.m) + "x" + std::to_string(c_.g.n) + "x" +
                           std::to_string(c_.g.k) + ")");
  }

  Config c_;
  const CublasLtApi& api_;
  cublasLtHandle_t handle_;
  cublasLtMatrixLayout_t x_ = nullptr, w_ = nullptr, d_ = nullptr;
  mutable std::vector<std::unique_ptr<Variant>> variants_;  // [0]: the whole device, made at plan build
  size_t workspace_ = 0;
  mutable std::mutex mutex_;
};

cublasComputeType_t compute_for(const KernelBuildInfo& info, DType t) {
  return info.precision() == Precision::kTF32 && t == DType::kFloat32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                      : CUBLAS_COMPUTE_32F;
}

// The epilogue cuBLASLt applies, and the activation left for our kernel.
cublasLtEpilogue_t epilogue_for(bool bias, const nn::Activation& act, nn::Activation* rest) {
  *rest = act;
  if (act.kind == nn::ActKind::kRelu) {
    *rest = nn::Activation{};
    return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
  }
  return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

// ---- MatMul / com.twinfer MatMul -------------------------------------------

// Batch strides for cuBLASLt, in elements: one matrix per output batch, or 0
// for an operand whose batch dims are all 1 (the same matrix every time). An
// operand that broadcasts otherwise is expanded to the output's batches first.
void batch_strides(const nn::MatMulGeom& g, int64_t* sa, int64_t* sb) {
  *sa = shape_numel(g.a_batch) == 1 ? 0 : g.M * g.K;
  *sb = shape_numel(g.b_batch) == 1 ? 0 : g.K * g.N;
}

bool matmul_supports(const KernelBuildInfo& info, std::string* why) {
  cudaDataType_t t;
  if (!cuda_float(info.input_dtype(0), &t)) {
    if (why) *why = std::string("cuBLASLt MatMul takes float32, float16, bfloat16, not ") + dtype_name(info.input_dtype(0));
    return false;
  }
  const nn::MatMulGeom g = nn::matmul_geom(info);
  if (static_cast<int>(g.y_batch.size()) > nn::BatchBroadcast::kMaxRank) {
    if (why) *why = "MatMul with more than " + std::to_string(nn::BatchBroadcast::kMaxRank) +
                    " batch dims has no CUDA kernel";
    return false;
  }
  if (g.K == 0 || shape_numel(g.y_batch) > INT32_MAX) {
    if (why) *why = "MatMul with K = 0 or more than 2^31 batches has no CUDA kernel";
    return false;
  }
  return true;
}

// An operand whose batches broadcast both ways (neither all 1 nor the
// output's) is expanded into scratch first: one matrix per output batch.
bool needs_expansion(const Shape& batch, const Shape& y_batch) {
  return batch != y_batch && shape_numel(batch) != 1;
}

class CudaMatMul final : public Kernel {
 public:
  explicit CudaMatMul(const KernelBuildInfo& info) : g_(nn::matmul_geom(info)), dtype_(info.input_dtype(0)) {
    const int64_t nb = shape_numel(g_.y_batch);
    const int rank = static_cast<int>(g_.y_batch.size());
    const size_t elem = dtype_size(dtype_);
    if (needs_expansion(g_.a_batch, g_.y_batch)) {
      nn::make_batch_broadcast(g_.a_batch.data(), g_.y_batch.data(), rank, &expand_a_);
      a_bytes_ = align_scratch(static_cast<size_t>(nb * g_.M * g_.K) * elem);
    }
    if (needs_expansion(g_.b_batch, g_.y_batch)) {
      nn::make_batch_broadcast(g_.b_batch.data(), g_.y_batch.data(), rank, &expand_b_);
      b_bytes_ = align_scratch(static_cast<size_t>(nb * g_.K * g_.N) * elem);
    }
    int64_t sa = 0, sb = 0;
    batch_strides(g_, &sa, &sb);
    LtMatmul::Config c;
    cuda_float(dtype_, &c.type);
    c.compute = compute_for(info, dtype_);
    c.elem_bytes = dtype_size(dtype_);
    c.g = nn::colmajor_gemm(g_.M, g_.N, g_.K, false, false);
    c.batch = static_cast<int>(shape_numel(g_.y_batch));
    c.stride_x = sb;  // the BLAS's first operand is our B
    c.stride_w = sa;
    c.stride_d = g_.M * g_.N;
    c.epilogue = epilogue_for(g_.has_bias, g_.act, &rest_);
    if (g_.has_residual) c.beta = 1.f;  // C = the residual, added before the epilogue's activation
    // An empty output needs no GEMM (cuBLASLt refuses layouts of 0 rows).
    if (c.batch > 0 && g_.M > 0 && g_.N > 0) mm_ = std::make_unique<LtMatmul>(c);
  }
  // Scratch: [A expanded][B expanded][cuBLASLt's workspace], each 256-aligned.
  size_t scratch_bytes() const override { return a_bytes_ + b_bytes_ + (mm_ ? mm_->workspace_bytes() : 0); }
  void run(KernelContext& ctx) const override {
    if (ctx.outputs[0].numel() == 0) return;
    const cudaStream_t s = stream_of(ctx);
    const void* bias = g_.has_bias ? ctx.inputs[2].data : nullptr;
    const void* residual = g_.has_residual ? ctx.inputs[3].data : nullptr;
    char* scratch = static_cast<char*>(ctx.scratch);
    const void* a = ctx.inputs[0].data;
    const void* b = ctx.inputs[1].data;
    const int64_t nb = shape_numel(g_.y_batch);
    const size_t elem = dtype_size(dtype_);
    if (a_bytes_) {
      expand_batches(a, expand_a_, nb, g_.M * g_.K, scratch, elem, s);
      a = scratch;
    }
    if (b_bytes_) {
      expand_batches(b, expand_b_, nb, g_.K * g_.N, scratch + a_bytes_, elem, s);
      b = scratch + a_bytes_;
    }
    mm_->run(b, a, ctx.outputs[0].data, bias, scratch + a_bytes_ + b_bytes_, s, ctx.stream->sm_count(), residual);
    apply_activation(ctx.outputs[0].data, ctx.outputs[0].numel(), dtype_, rest_, s);
  }
  const char* impl_name() const override {
    if (a_bytes_ || b_bytes_) return "cublasLt matmul (batches expanded)";
    return g_.has_residual ? "cublasLt matmul + residual (C)" : "cublasLt matmul";
  }

 private:
  static size_t align_scratch(size_t n) { return (n + 255) / 256 * 256; }

  nn::MatMulGeom g_;
  DType dtype_;
  nn::Activation rest_;
  std::unique_ptr<LtMatmul> mm_;
  nn::BatchBroadcast expand_a_, expand_b_;
  size_t a_bytes_ = 0, b_bytes_ = 0;  // scratch for the expanded operands (0: read in place)
};

// ---- Gemm / com.twinfer Gemm -------------------------------------------------

bool gemm_supports(const KernelBuildInfo& info, std::string* why) {
  cudaDataType_t t;
  if (!cuda_float(info.input_dtype(0), &t)) {
    if (why) *why = std::string("cuBLASLt Gemm takes float32, float16, bfloat16, not ") + dtype_name(info.input_dtype(0));
    return false;
  }
  const nn::GemmGeom g = nn::gemm_geom(info);
  if (g.K == 0) {
    if (why) *why = "Gemm with K = 0 has no CUDA kernel";
    return false;
  }
  return true;
}

class CudaGemm final : public Kernel {
 public:
  explicit CudaGemm(const KernelBuildInfo& info) : g_(nn::gemm_geom(info)), dtype_(info.input_dtype(0)) {
    LtMatmul::Config c;
    cuda_float(dtype_, &c.type);
    c.compute = compute_for(info, dtype_);
    c.elem_bytes = dtype_size(dtype_);
    c.g = nn::colmajor_gemm(g_.M, g_.N, g_.K, g_.trans_a, g_.trans_b);
    c.alpha = g_.alpha;
    bool bias = false;
    if (g_.has_c && g_.beta != 0.f) {
      c2_ = nn::gemm_c_2d(g_.c);
      // C as a row vector with beta 1 is a bias; otherwise C is broadcast
      // into the output first and accumulated with beta.
      bias = c2_[0] == 1 && c2_[1] == g_.N && g_.beta == 1.f;
      broadcast_c_ = !bias;
      if (broadcast_c_) c.beta = g_.beta;
    }
    c.epilogue = epilogue_for(bias, g_.act, &rest_);
    if (g_.M > 0 && g_.N > 0) mm_ = std::make_unique<LtMatmul>(c);  // else an empty output: nothing to run
  }
  size_t scratch_bytes() const override { return mm_ ? mm_->workspace_bytes() : 0; }
  void run(KernelContext& ctx) const override {
    if (ctx.outputs[0].numel() == 0) return;
    const cudaStream_t s = stream_of(ctx);
    void* y = ctx.outputs[0].data;
    if (broadcast_c_) broadcast_2d(ctx.inputs[2].data, c2_[0], c2_[1], y, g_.M, g_.N, dtype_size(dtype_), s);
    const void* bias = mm_->has_bias() ? ctx.inputs[2].data : nullptr;
    mm_->run(ctx.inputs[1].data, ctx.inputs[0].data, y, bias, ctx.scratch, s, ctx.stream->sm_count());
    apply_activation(y, ctx.outputs[0].numel(), dtype_, rest_, s);
  }
  const char* impl_name() const override { return "cublasLt gemm"; }

 private:
  nn::GemmGeom g_;
  DType dtype_;
  Shape c2_;
  bool broadcast_c_ = false;
  nn::Activation rest_;
  std::unique_ptr<LtMatmul> mm_;
};

}  // namespace

TWINFER_REGISTER_KERNEL("MatMul", Backend::kCUDA, 10, matmul_supports, make_kernel<CudaMatMul>);
TWINFER_REGISTER_KERNEL("MatMul", Backend::kCUDA, 10, matmul_supports, make_kernel<CudaMatMul>, kTwinferDomain);
TWINFER_REGISTER_KERNEL("Gemm", Backend::kCUDA, 10, gemm_supports, make_kernel<CudaGemm>);
TWINFER_REGISTER_KERNEL("Gemm", Backend::kCUDA, 10, gemm_supports, make_kernel<CudaGemm>, kTwinferDomain);

}  // namespace twinfer::cuda
