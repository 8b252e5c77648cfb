// LRN on CUDA: a thread per element sums x^2 over its channel window and
// scales x as the CPU kernel does (ops/vision/lrn.cc): the window
// [c - floor((size-1)/2), c + ceil((size-1)/2)] clipped to the channels, the
// sum in the element type in channel order, (bias + alpha/size * sum)^-beta,
// with beta = 0.75 as 1 / (r * sqrt(r)), r = sqrt(t).
#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/kernel_util.h"
#include "ops/elementwise/typeset.h"
#include "ops/vision/lrn.h"

namespace twinfer_gpu {

template <typename T>
__global__ void lrn(int64_t n, int64_t C, int64_t P, int64_t lo, int64_t hi, T a, T k, T b, bool b075,
                    const T* __restrict__ x, T* __restrict__ y) {
  for (int64_t t = first_index(); t < n; t += grid_stride()) {
    const int64_t i = t % P, c = (t / P) % C, nb = t / (P * C);
    T s = T(0);
    const int64_t j0 = c - lo < 0 ? 0 : c - lo, j1 = c + hi > C - 1 ? C - 1 : c + hi;
    for (int64_t j = j0; j <= j1; ++j) {
      const T v = x[(nb * C + j) * P + i];
      s += v * v;
    }
    const T u = k + a * s;
    if (b075) {
      const T r = sqrt(u);
      y[t] = x[t] / (r * sqrt(r));
    } else {
      y[t] = x[t] * pow(u, -b);
    }
  }
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {
namespace {

constexpr unsigned kLrnTypes = ew::kF32 | ew::kF64;

bool lrn_supports(const KernelBuildInfo& info, std::string* why) { return ew::check_input_dtype(info, 0, kLrnTypes, why); }

class CudaLrn final : public Kernel {
 public:
  explicit CudaLrn(const KernelBuildInfo& info)
      : dtype_(info.input_dtype(0)), p_(vision::lrn_params(info)), n_(shape_numel(info.input_shape(0))) {}
  void run(KernelContext& ctx) const override {
    const ew::LaunchConfig lc = ew::elementwise_launch(n_);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    const int64_t lo = (p_.size - 1) / 2, hi = p_.size - 1 - lo;
    ew::dispatch_typeset<kLrnTypes>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T a = static_cast<T>(p_.alpha) / static_cast<T>(p_.size);
      twinfer_gpu::lrn<<<lc.blocks, lc.threads, 0, s>>>(n_, p_.C, p_.P, lo, hi, a, static_cast<T>(p_.bias),
                                                        static_cast<T>(p_.beta), p_.beta == 0.75f,
                                                        ctx.inputs[0].as<const T>(), ctx.outputs[0].as<T>());
    });
    check_launch("LRN launch");
  }
  const char* impl_name() const override { return "cuda lrn"; }

 private:
  DType dtype_;
  vision::LrnParams p_;
  int64_t n_ = 0;
};

}  // namespace

TWINFER_REGISTER_KERNEL("LRN", Backend::kCUDA, 0, lrn_supports, make_kernel<CudaLrn>);

}  // namespace twinfer::cuda
