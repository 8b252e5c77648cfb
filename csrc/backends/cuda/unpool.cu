// MaxUnpool on CUDA: the output zeroed, then a thread per input element
// moves it to where its index points (ops/vision/unpool_index.h, the CPU
// kernel's math). Two elements may point at one place (overlapping pooling
// windows that shared a maximum, then X from a decoder rather than the
// pool): the CPU and onnxruntime write in order, so the last one wins. A
// first pass records, per output element, the last input that points at it
// (atomicMax of j + 1 in scratch); the second writes only that one. An
// index out of range sets the kernel error flag (error_flag.h) instead.
#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/error_flag.h"
#include "backends/cuda/kernel_util.h"
#include "ops/vision/unpool_geom.h"

namespace twinfer_gpu {

__global__ void max_unpool_owner(int64_t n, twinfer::vision::UnpoolGeom g, const int64_t* __restrict__ idx,
                                 unsigned long long* __restrict__ owner, int* error) {
  for (int64_t j = first_index(); j < n; j += grid_stride()) {
    const int64_t to = twinfer::vision::unpool_target(idx[j], g);
    if (to < 0) {
      *error = twinfer::cuda::kIndexOutOfRange;
      continue;
    }
    atomicMax(owner + to, static_cast<unsigned long long>(j + 1));
  }
}

template <typename U>
__global__ void max_unpool(int64_t n, twinfer::vision::UnpoolGeom g, const U* __restrict__ x,
                           const int64_t* __restrict__ idx, const unsigned long long* __restrict__ owner,
                           U* __restrict__ y) {
  for (int64_t j = first_index(); j < n; j += grid_stride()) {
    const int64_t to = twinfer::vision::unpool_target(idx[j], g);
    if (to >= 0 && owner[to] == static_cast<unsigned long long>(j + 1)) y[to] = x[j];
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
      : g_(unpool_geom(info)), width_(dtype_size(info.input_dtype(0))) {
    out_numel_ = 1;
    for (int d = 0; d < g_.rank; ++d) out_numel_ *= g_.out[d];
  }
  size_t scratch_bytes() const override { return static_cast<size_t>(out_numel_) * sizeof(unsigned long long); }
  void run(KernelContext& ctx) const override {
    const cudaStream_t s = stream_of(ctx);
    const size_t bytes = ctx.outputs[0].bytes();
    if (bytes) check(cudaMemsetAsync(ctx.outputs[0].data, 0, bytes, s), "MaxUnpool zero fill");
    const int64_t n = ctx.inputs[0].numel();
    const ew::LaunchConfig lc = ew::elementwise_launch(n);
    if (!lc.blocks) return;
    int* error = kernel_error_flag(ctx.backend_state);
    const int64_t* idx = ctx.inputs[1].as<const int64_t>();
    auto* owner = static_cast<unsigned long long*>(ctx.scratch);
    check(cudaMemsetAsync(owner, 0, scratch_bytes(), s), "MaxUnpool owners zero fill");
    twinfer_gpu::max_unpool_owner<<<lc.blocks, lc.threads, 0, s>>>(n, g_, idx, owner, error);
    check_launch("MaxUnpool owners launch");
    auto go = [&](auto tag) {
      using U = decltype(tag);
      twinfer_gpu::max_unpool<<<lc.blocks, lc.threads, 0, s>>>(n, g_, ctx.inputs[0].as<const U>(), idx, owner,
                                                               ctx.outputs[0].as<U>());
    };
    dispatch_width(width_, go);
    check_launch("MaxUnpool launch");
  }
  const char* impl_name() const override { return "cuda max unpool (a thread per element, last writer wins)"; }

 private:
  vision::UnpoolGeom g_;
  size_t width_;
  int64_t out_numel_ = 0;
};

}  // namespace

TWINFER_REGISTER_KERNEL("MaxUnpool", Backend::kCUDA, 0, unpool_supports, make_kernel<MaxUnpoolKernel>);

}  // namespace twinfer::cuda
