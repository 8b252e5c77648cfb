// com.twinfer::TokenQDQ (ops/quant/token_qdq.h) on the GPU: a TokenQDQ left
// unfused (its MatMul kept apart from QMatMul) runs where its neighbours do
// instead of pulling a copy to the host and back.
#include "backends/cuda/kernel_util.h"
#include "backends/cuda/token_quant_kernels.h"
#include "graph/domains.h"
#include "ops/quant/token_qdq.h"

namespace twinfer::cuda {
namespace {

class CudaTokenQDQ final : public Kernel {
 public:
  explicit CudaTokenQDQ(const KernelBuildInfo& info) {
    const Shape x = info.input_shape(0);
    k_ = x.empty() ? 1 : x.back();
    rows_ = k_ ? shape_numel(x) / k_ : 0;
  }
  const char* impl_name() const override { return "per-token quantize-dequantize (one block per row)"; }
  void run(KernelContext& ctx) const override {
    token_qdq_rows(ctx.inputs[0].as<const float>(), rows_, k_, ctx.outputs[0].as<float>(), stream_of(ctx));
  }

 private:
  int64_t rows_ = 0, k_ = 0;
};

}  // namespace

TWINFER_REGISTER_KERNEL(quant::kTokenQDQOp, Backend::kCUDA, 0, nullptr, make_kernel<CudaTokenQDQ>, kTwinferDomain);

}  // namespace twinfer::cuda
