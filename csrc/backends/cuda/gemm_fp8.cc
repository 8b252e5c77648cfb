// com.twinfer::FP8MatMul (ops/quant/fp8_matmul.h) on cuBLASLt's FP8 GEMM
// (Hopper): x rounded to E4M3 rows by our kernel (fp8_kernels.cu), the
// weights stored [N, K] E4M3, the column-major "TN" form FP8 requires
// (CUDA_GUIDE.md section 1), float32 results (fast accumulation inside
// the tensor cores unless TWINFER_FP8_FAST_ACCUM=0), the two per-tensor scales
// as cuBLASLt's A / B scale pointers, bias and ReLU / tanh-GELU in its
// epilogue (other activations after it), D in x's type. K and N are padded
// to 16 (FP8's leading-dimension rule); padded output columns are dropped.
// A float32 D takes its bias after the GEMM, in float32: cuBLASLt's FP8
// kernels with float32 output want a bfloat16 bias vector (cublasLt.h,
// BIAS_DATA_TYPE), which would round the bias the reference adds exactly.
// For float16 D, CUTLASS's FP8 GEMM (scaled_gemm.h) is the
// other form: the scales' product, the float32 bias and the whole
// activation in its epilogue, y [m, n] written directly; the two are timed
// at build and the faster kept (TWINFER_FP8_GEMM=cutlass|cublaslt forces).
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cuda/cublaslt.h"
#include "backends/cuda/fp8_kernels.h"
#include "backends/cuda/gemm_epilogue.h"
#include "backends/cuda/libraries.h"
#include "backends/cuda/scaled_gemm.h"
#include "backends/cuda/kernel_util.h"
#include "graph/domains.h"
#include "ops/nn/activation.h"
#include "ops/quant/fp8_matmul.h"

namespace twinfer::cuda {

namespace {

using namespace twinfer::quant;

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kFloat16: return CUDA_R_16F;
    case DType::kBFloat16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

class CudaFP8MatMul final : public Kernel {
  static constexpr int64_t kXScaleAt = 16;  // x's scale, in floats after w's

 public:
  explicit CudaFP8MatMul(const KernelBuildInfo& info)
      : api_(cublaslt()), xt_(info.input_dtype(kF8X)), act_(nn::parse_activation(info.node())) {
    int device = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    handle_ = cublaslt_handle(device);
    const Shape x = info.input_shape(kF8X), w = info.input_shape(kF8W);
    n_ = w[0];
    k_ = w[1];
    m_ = shape_numel(x) / (k_ ? k_ : 1);
    if (m_ == 0 || n_ == 0 || k_ == 0) info.fail(ErrorKind::kUnsupportedOp, "an empty FP8MatMul runs on the CPU");
    kp_ = round_up(k_, 16);
    np_ = round_up(n_, 16);
    // Weights [np, kp] E4M3 (zero padded), the scales, the bias in D's type.
    const uint8_t* wq = info.input_constant(kF8W)->data_as<uint8_t>();
    std::vector<uint8_t> wp(static_cast<size_t>(np_ * kp_), 0);
    for (int64_t r = 0; r < n_; ++r)
      for (int64_t c = 0; c < k_; ++c) wp[r * kp_ + c] = wq[r * k_ + c];
    w_ = device_copy(wp.data(), DType::kUInt8, {np_, kp_});
    // The two scales 64 bytes apart, each as aligned as a tensor's start.
    float scales[kXScaleAt + 1] = {};
    scales[0] = *info.input_constant(kF8WScale)->data_as<float>();
    scales[kXScaleAt] = *info.input_constant(kF8XScale)->data_as<float>();
    scales_ = device_copy(scales, DType::kFloat32, {kXScaleAt + 1});
    has_bias_ = info.has_input(kF8Bias);
    bias_after_ = has_bias_ && xt_ == DType::kFloat32;
    if (has_bias_) {
      const float* b = info.input_constant(kF8Bias)->data_as<float>();
      std::vector<float> bf(b, b + n_);
      if (bias_after_) {
        bias_ = device_copy(bf.data(), DType::kFloat32, {n_});
      } else {  // cuBLASLt wants the bias in D's type
        bf.resize(static_cast<size_t>(np_), 0.f);
        std::vector<uint16_t> bits(bf.size());
        for (size_t i = 0; i < bf.size(); ++i) bits[i] = xt_ == DType::kFloat16 ? float_to_half(bf[i]) : float_to_bf16(bf[i]);
        bias_ = device_copy(bits.data(), xt_, {np_});
      }
    }
    // Which activation cuBLASLt applies (ReLU; GELU is its tanh form); with
    // the bias added after the GEMM, the activation follows it there.
    const bool lt_bias = has_bias_ && !bias_after_;
    cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_DEFAULT;
    const bool lt_act = !bias_after_ && (act_.kind == nn::ActKind::kRelu || act_.kind == nn::ActKind::kGeluTanh);
    if (lt_act && act_.kind == nn::ActKind::kRelu) ep = lt_bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    else if (lt_act) ep = lt_bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    else if (lt_bias) ep = CUBLASLT_EPILOGUE_BIAS;
    rest_ = lt_act ? nn::Activation{} : act_;

    check_cublas(api_.desc_create(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate(fp8)");
    const cublasOperation_t t = CUBLAS_OP_T, nt = CUBLAS_OP_N;
    set(CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t));
    set(CUBLASLT_MATMUL_DESC_TRANSB, &nt, sizeof(nt));
    set(CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep));
    const float* sa = scales_.data_as<float>();  // A = w: w_scale; B = x: x_scale
    const float* sb = sa + kXScaleAt;
    set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof(sa));
    set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof(sb));
    // Fast accumulation (the tensor cores' own sums, not promoted to float32
    // every few k-blocks), as TransformerEngine's forward GEMMs and
    // torch._scaled_mm(use_fast_accum=True) run: its rounding is far below
    // E4M3's own (3 mantissa bits). TWINFER_FP8_FAST_ACCUM=0 promotes.
    const char* fast_env = std::getenv("TWINFER_FP8_FAST_ACCUM");
    const int8_t fast = fast_env && std::string(fast_env) == "0" ? 0 : 1;
    set(CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast));
    if (lt_bias) {
      const cudaDataType_t bt = cuda_type(xt_);
      set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt));
      const void* bp = bias_.data();
      set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof(bp));
    }
    a_ = make_layout(CUDA_R_8F_E4M3, kp_, np_, kp_);
    b_ = make_layout(CUDA_R_8F_E4M3, kp_, m_, kp_);
    d_ = make_layout(cuda_type(xt_), np_, m_, np_);
    // CUTLASS's form first where it applies: forced, it is all; where
    // cuBLASLt has no algorithm, it is the fallback; else the two are timed.
    const char* env = std::getenv("TWINFER_FP8_GEMM");
    const std::string mode = env ? env : "";
    std::string why_not_cutlass = mode == "cublaslt" ? "TWINFER_FP8_GEMM=cublaslt"
                                  : !fast           ? "TWINFER_FP8_FAST_ACCUM=0"
                                                    : "";
    std::unique_ptr<ScaledGemm> cutlass = why_not_cutlass.empty() ? make_cutlass(info, &why_not_cutlass) : nullptr;
    if (cutlass && mode == "cutlass") {
      adopt_cutlass(std::move(cutlass), "TWINFER_FP8_GEMM=cutlass");
      return;
    }
    // Each candidate is launched once on zeroed operands (see choose_working_algo).
    std::string timings;
    try {
      TrialBuffer xq(static_cast<size_t>(m_ * kp_)), dq(static_cast<size_t>(m_ * np_) * dtype_size(xt_));
      algo_ = choose_working_algo(
          handle_, desc_, a_, b_, d_, 16,
          "FP8 " + std::to_string(m_) + "x" + std::to_string(n_) + "x" + std::to_string(k_),
          [&](const cublasLtMatmulHeuristicResult_t& r, void* workspace, cudaStream_t s) {
            const float one = 1.f, zero = 0.f;
            return api_.matmul(handle_, desc_, &one, w_.data(), a_, xq.get(), b_, &zero, dq.get(), d_, dq.get(), d_,
                               &r.algo, workspace, r.workspaceSize, s);
          },
          cublaslt_tune_candidates(), &timings);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kUnsupportedOp || !cutlass) throw;
      adopt_cutlass(std::move(cutlass), std::string("cuBLASLt: ") + e.what());
      return;
    }
    name_ = std::string("cublasLt fp8 (E4M3, ") + (fast ? "fast accumulation" : "fp32 accumulate") + ")" +
            (timings.empty() ? "" : "; timed " + timings);
    if (!cutlass) {
      name_ += " (not CUTLASS: " + why_not_cutlass + ")";
      return;
    }
    keep_the_faster(std::move(cutlass));
  }
  ~CudaFP8MatMul() override {
    for (auto l : {a_, b_, d_})
      if (l) api_.layout_destroy(l);
    if (desc_) api_.desc_destroy(desc_);
  }

  // Scratch: [E4M3 rows of x][D when N is padded][workspace], 256-aligned
  // (CUTLASS's form: [E4M3 rows of x][its workspace]).
  size_t x_bytes() const { return align(static_cast<size_t>(m_ * kp_)); }
  size_t d_bytes() const { return cutlass_ ? 0 : cublaslt_d_bytes(); }
  // cuBLASLt's D when N is padded (y itself otherwise).
  size_t cublaslt_d_bytes() const {
    return np_ != n_ ? align(static_cast<size_t>(m_ * np_) * dtype_size(xt_)) : 0;
  }
  size_t scratch_bytes() const override {
    return x_bytes() + d_bytes() + align(cutlass_ ? cutlass_->workspace_bytes() : algo_.workspaceSize);
  }
  const char* impl_name() const override { return name_.c_str(); }

  void run(KernelContext& ctx) const override {
    const cudaStream_t s = stream_of(ctx);
    char* scratch = static_cast<char*>(ctx.scratch);
    auto* xq = reinterpret_cast<uint8_t*>(scratch);
    quantize_e4m3_rows(ctx.inputs[kF8X].data, xt_, scales_.data_as<float>() + kXScaleAt, m_, k_, kp_, xq, s);
    if (cutlass_) {
      cutlass_->run(cutlass_operands(xq, ctx.outputs[0].data), scratch + x_bytes(), s);
      return;
    }
    run_cublaslt(xq, ctx.outputs[0].data, scratch + x_bytes(), s);
  }

 private:
  // CUTLASS's FP8 GEMM (scaled_gemm.h) for this layer, with its column
  // scale (w_scale * x_scale) and float bias on the device; null with *why
  // where it does not apply. Its float16 y takes an overflow as infinity, as
  // the CPU kernel and cuBLASLt do (no saturation: ScaledGemmShape::saturate).
  std::unique_ptr<ScaledGemm> make_cutlass(const KernelBuildInfo& info, std::string* why) {
    ScaledGemmShape shape;
    shape.m = m_, shape.n = n_, shape.k = kp_, shape.in = DType::kFloat8E4M3FN, shape.out = xt_;
    shape.act = nn::ActFn::of(act_);
    shape.saturate = false;
    *why = scaled_gemm_unsupported(shape);
    if (!why->empty()) return nullptr;
    const float product = *info.input_constant(kF8WScale)->data_as<float>() *
                          *info.input_constant(kF8XScale)->data_as<float>();
    const std::vector<float> col(static_cast<size_t>(n_), product);
    cut_scale_ = device_copy(col.data(), DType::kFloat32, {n_});
    if (has_bias_) cut_bias_ = device_copy(info.input_constant(kF8Bias)->data_as<float>(), DType::kFloat32, {n_});
    return std::make_unique<ScaledGemm>(shape);
  }

  void adopt_cutlass(std::unique_ptr<ScaledGemm> cutlass, const std::string& why) {
    cutlass_ = std::move(cutlass);
    bias_ = Tensor();  // cuBLASLt's bias in D's type
    name_ = cutlass_->name() + " (" + why + ")";
  }

  // Both forms run at build on zeroed operands and the faster is kept; what
  // the loser alone needed is freed.
  void keep_the_faster(std::unique_ptr<ScaledGemm> cutlass) {
    TrialKey key("fp8 gemm");
    key << m_ << n_ << kp_ << static_cast<int64_t>(xt_) << static_cast<int64_t>(act_.kind) << has_bias_;
    const FormTiming t = time_two_forms("CUTLASS", "cuBLASLt", key, [&] {
      const size_t y_bytes = static_cast<size_t>(m_ * n_) * dtype_size(xt_);
      const TrialBuffer xq(static_cast<size_t>(m_ * kp_)), y(y_bytes),
          scratch(cublaslt_d_bytes() + align(std::max(cutlass->workspace_bytes(), algo_.workspaceSize)));
      auto* x8 = static_cast<uint8_t*>(xq.get());
      return fastest_of_two_ms(
          [&](cudaStream_t s) { cutlass->run(cutlass_operands(x8, y.get()), scratch.get(), s); },
          [&](cudaStream_t s) {
            std::lock_guard<std::mutex> apart_from_captures(cudnn_handle_mutex());  // as choose_working_algo's trials
            run_cublaslt(x8, y.get(), scratch.get(), s);
          });
    });
    if (t.first_wins) {
      adopt_cutlass(std::move(cutlass), t.timed);
    } else {
      cut_scale_ = Tensor();
      cut_bias_ = Tensor();
      name_ += "; " + t.timed;
    }
  }

  ScaledGemmOperands cutlass_operands(const uint8_t* xq, void* y) const {
    ScaledGemmOperands o;
    o.x = xq, o.w = w_.data(), o.col_scale = cut_scale_.data_as<float>(), o.y = y;
    o.bias = cut_bias_.storage() ? cut_bias_.data_as<float>() : nullptr;
    return o;
  }

  // cuBLASLt's form: the GEMM into y (or, N padded, into scratch and copied
  // out), then what its epilogue could not do. scratch: [D][workspace].
  void run_cublaslt(const uint8_t* xq, void* y, void* scratch_p, cudaStream_t s) const {
    char* scratch = static_cast<char*>(scratch_p);
    void* d = np_ != n_ ? static_cast<void*>(scratch) : y;
    void* workspace = scratch + cublaslt_d_bytes();
    const float one = 1.f, zero = 0.f;
    check_cublas(api_.matmul(handle_, desc_, &one, w_.data(), a_, xq, b_, &zero, d, d_, d, d_, &algo_.algo, workspace,
                             algo_.workspaceSize, s),
                 "cublasLtMatmul(fp8)");
    const size_t es = dtype_size(xt_);
    if (np_ != n_)
      check(cudaMemcpy2DAsync(y, n_ * es, d, np_ * es, n_ * es, m_, cudaMemcpyDeviceToDevice, s),
            "cudaMemcpy2DAsync (FP8MatMul output)");
    if (bias_after_)
      add_bias_activation_f32(static_cast<float*>(y), m_, n_, bias_.data_as<float>(), rest_, s);
    else
      apply_activation(y, m_ * n_, xt_, rest_, s);
  }

  static size_t align(size_t b) { return static_cast<size_t>(round_up(static_cast<int64_t>(b), 256)); }
  void set(cublasLtMatmulDescAttributes_t a, const void* v, size_t n) {
    check_cublas(api_.desc_set(desc_, a, v, n), "cublasLtMatmulDescSetAttribute(fp8)");
  }
  const CublasLtApi& api_;
  cublasLtHandle_t handle_ = nullptr;
  DType xt_;
  nn::Activation act_, rest_;
  int64_t m_ = 0, n_ = 0, k_ = 0, kp_ = 0, np_ = 0;
  bool has_bias_ = false, bias_after_ = false;  // bias_after_: float32 D, bias added by our kernel
  Tensor w_, scales_, bias_;
  std::string name_;  // with the candidates timed
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
  cublasLtMatmulHeuristicResult_t algo_{};
  std::unique_ptr<ScaledGemm> cutlass_;  // CUTLASS's form, when it runs the layer instead
  Tensor cut_scale_, cut_bias_;          // its column scale (w_scale * x_scale) and float bias, [n]
};

}  // namespace

TWINFER_REGISTER_KERNEL(kFP8MatMulOp, Backend::kCUDA, 10, fp8_matmul_supports, make_kernel<CudaFP8MatMul>, kTwinferDomain);

}  // namespace twinfer::cuda
