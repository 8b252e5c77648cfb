// CUDA kernels of the unary math ops and the activations: the shared
// functors (ops/elementwise/functors.h) in one grid-stride kernel, one
// registration line per op list.
#include <cstring>
#include <limits>
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
      twinfer_gpu::unary_flat<<<twinfer_gpu::flat_grid<S, O>(lc), lc.threads, 0, s>>>(n, ctx.inputs[0].as<const S>(), ctx.outputs[0].as<O>(),
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

// ---- Clip: constant bounds are read when the kernel is built; bounds that
// are graph inputs or computed are read by the kernel on the device.
bool clip_supports(const KernelBuildInfo& info, std::string* why) {
  if (!check_input_dtype(info, 0, kNumericTypes & kCudaElementwiseTypes, why) || !check_same_dtype(info, {0, 1, 2}, why))
    return false;
  for (size_t i = 1; i <= 2; ++i)
    if (info.has_input(i) && shape_numel(info.input_shape(i)) != 1) {
      if (why) *why = std::string("Clip ") + (i == 1 ? "min" : "max") + " must be a scalar";
      return false;
    }
  return true;
}

// Clip with bounds in device memory (null: no bound), storage in and out.
template <typename S>
struct ClipOnDevice {
  const S* lo;
  const S* hi;
  TWINFER_HD S operator()(S x) const {
    using C = compute_t<S>;
    C v = load(x);
    if (lo && v < static_cast<C>(load(*lo))) v = load(*lo);
    if (hi && v > static_cast<C>(load(*hi))) v = load(*hi);
    return store<S>(v);
  }
};

class ClipKernel final : public Kernel {
 public:
  explicit ClipKernel(const KernelBuildInfo& info) : dtype_(info.input_dtype(0)) {
    for (size_t i = 1; i <= 2; ++i)
      if (info.has_input(i) && !info.input_constant(i)) constant_bounds_ = false;
    // The bounds are kept in the compute type's own bytes: through a double,
    // int64's default max (2^63 - 1) would round to 2^63 and overflow.
    dispatch_typeset<kNumericTypes & kCudaElementwiseTypes>(dtype_, [&](auto tag) {
      using S = typename decltype(tag)::type;
      using C = compute_t<S>;
      static_assert(sizeof(C) <= sizeof(lo_), "Clip bound wider than its store");
      C lo = std::numeric_limits<C>::has_infinity ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::lowest();
      C hi = std::numeric_limits<C>::has_infinity ? std::numeric_limits<C>::infinity() : std::numeric_limits<C>::max();
      // Before opset 11 the bounds are float attributes (the CPU kernel's
      // rule); ignored, an fp16 plan's saturating Clip clipped at +-inf.
      const graph::Node& n = info.node();
      if (n.has_attr("min")) lo = static_cast<C>(n.attr_float("min", 0.f));
      if (n.has_attr("max")) hi = static_cast<C>(n.attr_float("max", 0.f));
      if (const Tensor* t = info.input_constant(1)) lo = static_cast<C>(load(*t->data_as<S>()));
      if (const Tensor* t = info.input_constant(2)) hi = static_cast<C>(load(*t->data_as<S>()));
      std::memcpy(lo_, &lo, sizeof(C));
      std::memcpy(hi_, &hi, sizeof(C));
    });
  }
  void run(KernelContext& ctx) const override {
    const int64_t n = ctx.inputs[0].numel();
    const LaunchConfig lc = elementwise_launch(n);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    if (!constant_bounds_) {
      dispatch_typeset<kNumericTypes & kCudaElementwiseTypes>(dtype_, [&](auto tag) {
        using S = typename decltype(tag)::type;
        auto bound = [&](size_t i) { return ctx.inputs.size() > i ? ctx.inputs[i].as<const S>() : nullptr; };
        twinfer_gpu::unary_flat<<<twinfer_gpu::flat_grid<S>(lc), lc.threads, 0, s>>>(
            n, ctx.inputs[0].as<const S>(), ctx.outputs[0].as<S>(), ClipOnDevice<S>{bound(1), bound(2)});
      });
      check_launch("Clip kernel launch");
      return;
    }
    dispatch_typeset<kNumericTypes & kCudaElementwiseTypes>(dtype_, [&](auto tag) {
      using S = typename decltype(tag)::type;
      using C = compute_t<S>;
      C lo, hi;
      std::memcpy(&lo, lo_, sizeof(C));
      std::memcpy(&hi, hi_, sizeof(C));
      const Clip<C> f{lo, hi};
      twinfer_gpu::unary_flat<<<twinfer_gpu::flat_grid<S>(lc), lc.threads, 0, s>>>(n, ctx.inputs[0].as<const S>(), ctx.outputs[0].as<S>(),
                                                               Lift1<S, Clip<C>>{f});
    });
    check_launch("Clip kernel launch");
  }
  const char* impl_name() const override { return "cuda elementwise"; }

 private:
  DType dtype_;
  bool constant_bounds_ = true;  // else the kernel reads them (ClipOnDevice)
  alignas(8) unsigned char lo_[8] = {}, hi_[8] = {};  // the constant bounds, as compute_t<S>
};

}  // namespace

#define TWINFER_CUDA_UNARY(op, Traits) \
  TWINFER_REGISTER_KERNEL(op, Backend::kCUDA, 0, supports<Traits>, make_kernel<UnaryKernel<Traits>>);
TWINFER_UNARY_OPS(TWINFER_CUDA_UNARY)
TWINFER_ACTIVATION_OPS(TWINFER_CUDA_UNARY)
#undef TWINFER_CUDA_UNARY
TWINFER_REGISTER_KERNEL("Gelu", Backend::kCUDA, 0, gelu_supports, make_gelu);
TWINFER_REGISTER_KERNEL("Clip", Backend::kCUDA, 0, clip_supports, make_kernel<ClipKernel>);

}  // namespace twinfer::cuda
