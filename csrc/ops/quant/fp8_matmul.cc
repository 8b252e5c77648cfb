// com.twinfer::FP8MatMul (fp8_matmul.h): the shape and type rule and the
// CPU kernel, the reference the CUDA kernel (backends/cuda/gemm_fp8.cc) is
// tested against and what the simulated device runs: x rounded to E4M3 as
// fp8_quantize does, the decoded values multiplied in float32.
#include <vector>

#include "core/parallel.h"
#include "graph/domains.h"
#include "ops/kernel.h"
#include "ops/nn/activation.h"
#include "ops/quant/fp8_matmul.h"
#include "ops/schema.h"

namespace twinfer::quant {
namespace {

bool float_type(DType t) { return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16; }

void fp8_matmul_infer(InferContext& c) {
  if (!(c.num_inputs() >= 4 && c.num_inputs() <= kF8NumInputs))
    c.fail(ErrorKind::kModelFormat, "FP8MatMul takes 4 or 5 inputs");
  const DType xt = c.input_dtype(kF8X);
  if (!(float_type(xt)))
    c.fail(ErrorKind::kDType, std::string("FP8MatMul x must be float32/16, got ") + dtype_name(xt));
  if (!(c.input_dtype(kF8W) == DType::kFloat8E4M3FN)) c.fail(ErrorKind::kDType, "FP8MatMul w must be float8e4m3fn");
  for (size_t i : {kF8XScale, kF8WScale})
    if (!(c.input_dtype(i) == DType::kFloat32 && c.input_known(i) && shape_numel(c.input_values_shape(i)) == 1))
      c.fail(ErrorKind::kModelFormat, "FP8MatMul scales must be one constant float32 value");
  if (!c.input_has_shape(kF8X) || !c.input_has_shape(kF8W)) return c.set_output_rank_unknown(0, xt);
  const SymShape& x = c.input_shape(kF8X);
  const SymShape& w = c.input_shape(kF8W);
  if (!(w.size() == 2 && !x.empty())) c.fail(ErrorKind::kShape, "FP8MatMul w must be 2-D [N, K] and x of rank >= 1");
  if (x.back().known() && w[1].known())
    if (!(x.back().value == w[1].value))
      c.fail(ErrorKind::kShape, "inner dimensions differ: x " + sym_shape_str(x) + ", w [N, K] " + sym_shape_str(w));
  SymShape y = x;
  y.back() = w[0];
  c.set_output(0, xt, y);
}

float load_x(DType t, const void* p, int64_t i) {
  switch (t) {
    case DType::kFloat16: return half_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::kBFloat16: return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

void store_y(DType t, void* p, int64_t i, float v) {
  switch (t) {
    case DType::kFloat16: static_cast<uint16_t*>(p)[i] = float_to_half(v); break;
    case DType::kBFloat16: static_cast<uint16_t*>(p)[i] = float_to_bf16(v); break;
    default: static_cast<float*>(p)[i] = v;
  }
}

class FP8MatMulKernel final : public Kernel {
 public:
  explicit FP8MatMulKernel(const KernelBuildInfo& info) : xt_(info.input_dtype(kF8X)) {
    const Shape x = info.input_shape(kF8X), w = info.input_shape(kF8W);
    n_ = w[0];
    k_ = w[1];
    m_ = shape_numel(x) / (k_ ? k_ : 1);
    x_scale_ = *info.input_constant(kF8XScale)->data_as<float>();
    scale_ = x_scale_ * *info.input_constant(kF8WScale)->data_as<float>();
    const uint8_t* wq = info.input_constant(kF8W)->data_as<uint8_t>();
    const Float8Format f = Float8Traits<float8_e4m3fn_t>::fmt();
    wt_.resize(static_cast<size_t>(k_ * n_));
    for (int64_t n = 0; n < n_; ++n)
      for (int64_t k = 0; k < k_; ++k) wt_[k * n_ + n] = float8_to_float(wq[n * k_ + k], f);  // [K, N]: rows stream
    if (info.has_input(kF8Bias)) {
      const Tensor& b = *info.input_constant(kF8Bias);
      bias_.assign(b.data_as<float>(), b.data_as<float>() + n_);
    }
    act_ = nn::parse_activation(info.node());
  }
  size_t scratch_bytes() const override { return 0; }
  const char* impl_name() const override { return "fp8 reference (E4M3 inputs, float32 products)"; }

  void run(KernelContext& ctx) const override {
    const void* x = ctx.inputs[kF8X].data;
    void* y = ctx.outputs[0].data;
    const Float8Format f = Float8Traits<float8_e4m3fn_t>::fmt();
    parallel_for(m_, ctx.num_threads, 4, [&](int64_t b, int64_t e) {
      std::vector<float> row(static_cast<size_t>(n_)), xq(static_cast<size_t>(k_));
      for (int64_t m = b; m < e; ++m) {
        for (int64_t k = 0; k < k_; ++k) xq[k] = float8_to_float(fp8_quantize(load_x(xt_, x, m * k_ + k), x_scale_), f);
        std::fill(row.begin(), row.end(), 0.f);
        for (int64_t k = 0; k < k_; ++k) {
          const float a = xq[k];
          const float* wr = &wt_[k * n_];
          for (int64_t n = 0; n < n_; ++n) row[n] += a * wr[n];
        }
        for (int64_t n = 0; n < n_; ++n)
          store_y(xt_, y, m * n_ + n, act_.apply(row[n] * scale_ + (bias_.empty() ? 0.f : bias_[n])));
      }
    });
  }

 private:
  DType xt_;
  int64_t m_ = 0, n_ = 0, k_ = 0;
  float x_scale_ = 1.f, scale_ = 1.f;
  std::vector<float> wt_, bias_;
  nn::Activation act_;
};

}  // namespace

bool fp8_matmul_supports(const KernelBuildInfo& info, std::string* why) {
  for (size_t i : {kF8XScale, kF8W, kF8WScale, kF8Bias})
    if (info.has_input(i) && !info.input_constant(i)) {
      if (why) *why = "FP8MatMul needs constant weights, scales and bias";
      return false;
    }
  for (size_t i : {kF8XScale, kF8WScale, kF8Bias})
    if (info.has_input(i) && info.input_dtype(i) != DType::kFloat32) {
      if (why) *why = "FP8MatMul's scales and bias are float32";
      return false;
    }
  return true;
}

TWINFER_REGISTER_SCHEMA(kFP8MatMulOp, fp8_matmul_infer, kTwinferDomain);
TWINFER_REGISTER_KERNEL(kFP8MatMulOp, Backend::kCPU, 10, fp8_matmul_supports, make_kernel<FP8MatMulKernel>,
                        kTwinferDomain);

}  // namespace twinfer::quant
