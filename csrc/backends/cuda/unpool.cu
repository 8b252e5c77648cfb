// MaxUnpool on CUDA: the output zeroed, then a thread per input element
// moves it to where its index points (ops/vision/unpool_index.h, the CPU
// kernel's math). Indices MaxPool produced never send two different values
// to one place (two windows that share their maximum write the same value),
// so the order of the writes does not matter. An index out of range sets
// the kernel error flag (error_flag.h) instead of writing.
#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/error_flag.h"
#include "backends/cuda/kernel_util.h"
#include "ops/vision/unpool_geom.h"

namespace twinfer_gpu {

template <typename U>
__global__ void max_unpool(int64_t n, twinfer::vision::UnpoolGeom g, const U* __restrict__ x,
                           const int64_t* __restrict__ idx, U* __restrict__ y, int* error) {
  for (int64_t j = first_index(); j < n; j += grid_stride()) {
    const int64_t to = twinfer::vision::unpool_target(idx[j], g);
    if (to < 0) {
      *error = twinfer::cuda::kIndexOutOfRange;
      continue;
    }
    y[to] = x[j];
  }
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {
namespace {

bool unpool_supports(const KernelBuildInfo& info, std::string* why) {
  const DType dt = info.input_dtype(0);
  if (!dtype_is_float(dt) && !dtype_is_integer(dt)) {
    if (why) *why = std::string("MaxUnpool does not support ") + dtype_name(dt);
    return false;
  }
  const size_t rank = info.input(0).shape.size();
  if (rank > static_cast<size_t>(vision::kMaxUnpoolRank)) {
    if (why) *why = "MaxUnpool of rank " + std::to_string(rank) + " has no CUDA kernel (at most " +
                    std::to_string(vision::kMaxUnpoolRank) + ")";
    return false;
  }
  return true;
}

vision::UnpoolGeom unpool_geom(const KernelBuildInfo& info) {
  const vision::UnpoolShapes s = vision::unpool_shapes(info);
  if (s.out.size() > static_cast<size_t>(vision::kMaxUnpoolRank)) info.fail(ErrorKind::kUnsupportedOp, "rank above 8");
  vision::UnpoolGeom g;
  g.rank = static_cast<int>(s.out.size());
  for (int d = 0; d < g.rank; ++d) {
    g.dflt[d] = s.dflt[d];
    g.out[d] = s.out[d];
  }
  g.total = shape_numel(s.dflt);
  g.same = s.out == s.dflt;
  return g;
}

class MaxUnpoolKernel final : public Kernel {
 public:
  explicit MaxUnpoolKernel(const KernelBuildInfo& info)
      : g_(unpool_geom(info)), width_(dtype_size(info.input_dtype(0))) {}
  void run(KernelContext& ctx) const override {
    const cudaStream_t s = stream_of(ctx);
    const size_t bytes = ctx.outputs[0].bytes();
    if (bytes) check(cudaMemsetAsync(ctx.outputs[0].data, 0, bytes, s), "MaxUnpool zero fill");
    const int64_t n = ctx.inputs[0].numel();
    const ew::LaunchConfig lc = ew::elementwise_launch(n);
    if (!lc.blocks) return;
    int* error = kernel_error_flag(ctx.backend_state);
    const int64_t* idx = ctx.inputs[1].as<const int64_t>();
    auto go = [&](auto tag) {
      using U = decltype(tag);
      twinfer_gpu::max_unpool<<<lc.blocks, lc.threads, 0, s>>>(n, g_, ctx.inputs[0].as<const U>(), idx,
                                                               ctx.outputs[0].as<U>(), error);
    };
    dispatch_width(width_, go);
    check_launch("MaxUnpool launch");
  }
  const char* impl_name() const override { return "cuda max unpool (a thread per element)"; }

 private:
  vision::UnpoolGeom g_;
  size_t width_;
};

}  // namespace

TWINFER_REGISTER_KERNEL("MaxUnpool", Backend::kCUDA, 0, unpool_supports, make_kernel<MaxUnpoolKernel>);

}  // namespace twinfer::cuda
