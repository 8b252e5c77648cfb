// com.twinfer::TokenQDQ (token_qdq.h): the shape rule and the reference CPU
// kernel, written plainly per row so it stays an oracle for the fused path.
#include "ops/quant/token_qdq.h"

#include <cmath>

#include "core/parallel.h"
#include "graph/domains.h"
#include "ops/kernel.h"
#include "ops/quant/token_quant.h"
#include "ops/schema.h"

namespace twinfer::quant {
namespace {

void token_qdq_infer(InferContext& c) {
  if (!(c.num_inputs() == 1)) c.fail(ErrorKind::kModelFormat, "TokenQDQ takes one input");
  if (!(c.input_dtype(0) == DType::kFloat32))
    c.fail(ErrorKind::kDType, std::string("TokenQDQ x must be float32, got ") + dtype_name(c.input_dtype(0)));
  if (!c.input_has_shape(0)) return c.set_output_rank_unknown(0, DType::kFloat32);
  if (!(!c.input_shape(0).empty()))
    c.fail(ErrorKind::kShape, "TokenQDQ x must have rank >= 1 (its last axis is a token)");
  c.set_output(0, DType::kFloat32, c.input_shape(0));
}

class TokenQDQKernel final : public Kernel {
 public:
  explicit TokenQDQKernel(const KernelBuildInfo& info) {
    const Shape x = info.input_shape(0);
    k_ = x.empty() ? 1 : x.back();
    rows_ = k_ ? shape_numel(x) / k_ : 0;
  }
  void run(KernelContext& ctx) const override {
    const float* x = ctx.inputs[0].as<const float>();
    float* y = ctx.outputs[0].as<float>();
    const int64_t k = k_;
    parallel_for(rows_, ctx.num_threads, 64, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        float amax = 0.f;
        for (int64_t i = 0; i < k; ++i)
          if (std::fabs(x[r * k + i]) > amax) amax = std::fabs(x[r * k + i]);
        const float s = token_scale(amax);
        for (int64_t i = 0; i < k; ++i) y[r * k + i] = static_cast<float>(token_quantize(x[r * k + i], s)) * s;
      }
    });
  }

 private:
  int64_t rows_ = 0, k_ = 0;
};

}  // namespace

TWINFER_REGISTER_SCHEMA(kTokenQDQOp, token_qdq_infer, kTwinferDomain);
TWINFER_REGISTER_KERNEL(kTokenQDQOp, Backend::kCPU, 0, nullptr, make_kernel<TokenQDQKernel>, kTwinferDomain);

}  // namespace twinfer::quant
