// CUDA Cast / CastLike between the standard types (float32/64, float16,
// bfloat16, int8/uint8/int32/int64, bool) with the CPU's conversions
// (ew::cast_value: truncation toward zero, NaN -> 0, saturation, wrap-around
// for narrowing integers, != 0 for bool). The 8-bit and 4-bit float types
// stay on the CPU for now.
#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/kernel_util.h"
#include "ops/elementwise/cast_ops.h"

namespace twinfer::cuda {
namespace {

using namespace twinfer::ew;

template <typename To>
struct CastTo {
  template <typename From> TWINFER_HD To operator()(From v) const { return cast_value<To>(v); }
};

bool cast_supports(const KernelBuildInfo& info, std::string* why) {
  return check_input_dtype(info, 0, kCudaElementwiseTypes, why) &&
         (in_typeset(kCudaElementwiseTypes, info.output(0).dtype) ||
          (why && (*why = std::string("Cast to ") + dtype_name(info.output(0).dtype) +
                          " has no CUDA kernel yet", false)));
}

class CastKernel final : public Kernel {
 public:
  explicit CastKernel(const KernelBuildInfo& info) : from_(info.input_dtype(0)), to_(info.output(0).dtype) {}
  void run(KernelContext& ctx) const override {
    const int64_t n = ctx.inputs[0].numel();
    const LaunchConfig lc = elementwise_launch(n);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    if (from_ == to_) {
      check(cudaMemcpyAsync(ctx.outputs[0].data, ctx.inputs[0].data, ctx.inputs[0].bytes(),
                            cudaMemcpyDeviceToDevice, s),
            "cudaMemcpyAsync");
      return;
    }
    dispatch_typeset<kCudaElementwiseTypes>(from_, [&](auto tf) {
      using F = typename decltype(tf)::type;
      dispatch_typeset<kCudaElementwiseTypes>(to_, [&](auto tt) {
        using T = typename decltype(tt)::type;
        twinfer_gpu::unary_flat<<<twinfer_gpu::flat_grid<F, T>(lc), lc.threads, 0, s>>>(n, ctx.inputs[0].as<const F>(),
                                                                 ctx.outputs[0].as<T>(), CastTo<T>{});
      });
    });
    check_launch("Cast kernel launch");
  }
  const char* impl_name() const override { return "cuda cast"; }

 private:
  DType from_, to_;
};

}  // namespace

TWINFER_REGISTER_KERNEL("Cast", Backend::kCUDA, 0, cast_supports, make_kernel<CastKernel>);
TWINFER_REGISTER_KERNEL("CastLike", Backend::kCUDA, 0, cast_supports, make_kernel<CastKernel>);

}  // namespace twinfer::cuda
