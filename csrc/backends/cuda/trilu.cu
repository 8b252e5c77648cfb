// Trilu on CUDA: keep the upper (j - i >= k) or lower (j - i <= k) triangle of
// the last two dims and zero the rest, as the CPU kernel does
// (ops/tensor/trilu.cc). A thread per element, by element width (zero bytes
// are zero in every dtype). k is read on the device, so a k that is a graph
// input or computed needs no trip to the host.
#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/kernel_util.h"
#include "ops/tensor/tensor_util.h"

namespace twinfer_gpu {

template <typename U>
__global__ void trilu(int64_t n, int64_t rows, int64_t cols, bool upper, const int64_t* __restrict__ kp,
                      const U* __restrict__ x, U* __restrict__ y) {
  const int64_t k = kp ? *kp : 0;
  for (int64_t t = first_index(); t < n; t += grid_stride()) {
    const int64_t j = t % cols, i = (t / cols) % rows;
    const bool keep = upper ? j - i >= k : j - i <= k;
    y[t] = keep ? x[t] : U(0);
  }
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {
namespace {

using ew::elementwise_launch;
using ew::LaunchConfig;

bool trilu_supports(const KernelBuildInfo& info, std::string* why) {
  const size_t w = dtype_size(info.input_dtype(0));
  if (w == 1 || w == 2 || w == 4 || w == 8) return true;
  if (why) *why = std::string("Trilu of ") + dtype_name(info.input_dtype(0)) + " has no CUDA kernel";
  return false;
}

class TriluKernel final : public Kernel {
 public:
  explicit TriluKernel(const KernelBuildInfo& info)
      : upper_(info.node().attr_int("upper", 1) != 0), width_(dtype_size(info.input_dtype(0))) {
    const Shape s = info.input_shape(0);
    rows_ = s[s.size() - 2];
    cols_ = s[s.size() - 1];
  }
  void run(KernelContext& ctx) const override {
    const int64_t n = ctx.inputs[0].numel();
    const LaunchConfig lc = elementwise_launch(n);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    const int64_t* k = ctx.inputs.size() > 1 ? ctx.inputs[1].as<const int64_t>() : nullptr;
    auto go = [&](auto tag) {
      using U = decltype(tag);
      twinfer_gpu::trilu<<<lc.blocks, lc.threads, 0, s>>>(n, rows_, cols_, upper_, k, ctx.inputs[0].as<const U>(),
                                                           ctx.outputs[0].as<U>());
    };
    dispatch_width(width_, go);
    check_launch("Trilu kernel launch");
  }
  const char* impl_name() const override { return "cuda trilu"; }

 private:
  bool upper_;
  size_t width_;
  int64_t rows_ = 0, cols_ = 0;
};

}  // namespace

TWINFER_REGISTER_KERNEL("Trilu", Backend::kCUDA, 0, trilu_supports, make_kernel<TriluKernel>);

}  // namespace twinfer::cuda
