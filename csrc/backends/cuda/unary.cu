// CUDA kernels of the unary math ops and the activations: the shared
// functors (ops/elementwise/functors.h) in one grid-stride kernel, one
// registration line per op list.
#include <type_traits>

#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/kernel_util.h"
#include "ops/elementwise/activation_ops.h"
#include "ops/elementwise/unary_ops.h"

namespace twinfer::cuda {
namespace {

using namespace twinfer::ew;

// Storage in, storage out (16-bit floats computed in float).
template <typename Out, typename F>
struct Lift1 {
  F f;
  template <typename A> TWINFER_HD Out operator()(A a) const { return store<Out>(f(load(a))); }
};

template <typename Op>
bool supports(const KernelBuildInfo& info, std::string* why) {
  return unary_supports<Op>(info, why) && check_input_dtype(info, 0, Op::kTypes & kCudaElementwiseTypes, why);
}

template <typename Op>
class UnaryKernel final : public Kernel {
 public:
  explicit UnaryKernel(const KernelBuildInfo& info) : f_(Op::make(info)), dtype_(info.input_dtype(0)) {}
  void run(KernelContext& ctx) const override {
    const int64_t n = ctx.inputs[0].numel();
    const LaunchConfig lc = elementwise_launch(n);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    dispatch_typeset<Op::kTypes & kCudaElementwiseTypes>(dtype_, [&](auto tag) {
      using S = typename decltype(tag)::type;
      using O = std::conditional_t<Op::kBoolOut, bool, S>;
      twinfer_gpu::unary_flat<<<lc.blocks, lc.threads, 0, s>>>(n, ctx.inputs[0].as<const S>(), ctx.outputs[0].as<O>(),
                                                               Lift1<O, typename Op::Functor>{f_});
    });
    check_launch("elementwise kernel launch");
  }
  const char* impl_name() const override { return "cuda elementwise"; }

 private:
  typename Op::Functor f_;
  DType dtype_;
};

bool gelu_supports(const KernelBuildInfo& info, std::string* why) {
  return gelu_check(info, why) && supports<GeluOp>(info, why);
}
std::unique_ptr<Kernel> make_gelu(const KernelBuildInfo& info) {
  if (gelu_tanh(info)) return make_kernel<UnaryKernel<GeluTanhOp>>(info);
  return make_kernel<UnaryKernel<GeluOp>>(info);
}

}  // namespace

#define TWINFER_CUDA_UNARY(op, Traits) \
  TWINFER_REGISTER_KERNEL(op, Backend::kCUDA, 0, supports<Traits>, make_kernel<UnaryKernel<Traits>>);
TWINFER_UNARY_OPS(TWINFER_CUDA_UNARY)
TWINFER_ACTIVATION_OPS(TWINFER_CUDA_UNARY)
#undef TWINFER_CUDA_UNARY
TWINFER_REGISTER_KERNEL("Gelu", Backend::kCUDA, 0, gelu_supports, make_gelu);

}  // namespace twinfer::cuda
