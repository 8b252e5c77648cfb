// ArgMax / ArgMin over one axis on CUDA (keepdims, select_last_index), int64
// output. The input seen as [outer, n, inner]: one thread per output scans
// its n values in order with the CPU kernel's rule (ops/reduce/arg_better.h:
// ties, NaN), so both give the same index; consecutive threads read
// consecutive inner positions.
#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/kernel_util.h"
#include "ops/reduce/arg_better.h"

namespace twinfer_gpu {

template <typename T, bool kMax, bool kLast>
__global__ void arg_scan(int64_t outputs, int64_t n, int64_t inner, const T* __restrict__ x, int64_t* __restrict__ y) {
  for (int64_t t = first_index(); t < outputs; t += grid_stride()) {
    const int64_t o = t / inner, j = t - o * inner;
    const T* xp = x + o * n * inner + j;
    auto best = twinfer::ew::load(xp[0]);
    int64_t bi = 0;
    for (int64_t i = 1; i < n; ++i) {
      const auto v = twinfer::ew::load(xp[i * inner]);
      if (twinfer::reduce::arg_better<kMax, kLast>(v, best)) {
        best = v;
        bi = i;
      }
    }
    y[t] = bi;
  }
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {
namespace {

constexpr unsigned kArgTypes = ew::kNumericTypes & kCudaElementwiseTypes;

bool arg_supports(const KernelBuildInfo& info, std::string* why) {
  if (!ew::check_input_dtype(info, 0, kArgTypes, why)) return false;
  const Shape in = info.input_shape(0);
  const int64_t r = static_cast<int64_t>(in.size()), axis = info.node().attr_int("axis", 0);
  if (r < 1 || axis < -r || axis >= r) {
    if (why) *why = "an ArgMax/ArgMin axis out of range runs on the CPU, which names the error";
    return false;
  }
  return true;
}

class CudaArg final : public Kernel {
 public:
  explicit CudaArg(const KernelBuildInfo& info)
      : dtype_(info.input_dtype(0)), max_(info.node().op_type == "ArgMax"),
        last_(info.node().attr_int("select_last_index", 0) != 0) {
    const Shape in = info.input_shape(0);
    int64_t axis = info.node().attr_int("axis", 0);
    if (axis < 0) axis += static_cast<int64_t>(in.size());
    for (int64_t d = 0; d < axis; ++d) outer_ *= in[d];
    n_ = in[axis];
    for (size_t d = axis + 1; d < in.size(); ++d) inner_ *= in[d];
    if (n_ == 0 && outer_ * inner_ > 0) info.fail(ErrorKind::kShape, "cannot reduce an empty axis");
  }

  void run(KernelContext& ctx) const override {
    const int64_t outputs = outer_ * inner_;
    const ew::LaunchConfig lc = ew::elementwise_launch(outputs);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    ew::dispatch_typeset<kArgTypes>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = ctx.inputs[0].as<const T>();
      int64_t* y = ctx.outputs[0].as<int64_t>();
      auto go = [&](auto kernel) { kernel<<<lc.blocks, lc.threads, 0, s>>>(outputs, n_, inner_, x, y); };
      if (max_)
        last_ ? go(twinfer_gpu::arg_scan<T, true, true>) : go(twinfer_gpu::arg_scan<T, true, false>);
      else
        last_ ? go(twinfer_gpu::arg_scan<T, false, true>) : go(twinfer_gpu::arg_scan<T, false, false>);
    });
    check_launch("ArgMax/ArgMin launch");
  }
  const char* impl_name() const override { return "cuda scan"; }

 private:
  DType dtype_;
  bool max_, last_;
  int64_t outer_ = 1, n_ = 0, inner_ = 1;
};

}  // namespace

TWINFER_REGISTER_KERNEL("ArgMax", Backend::kCUDA, 0, arg_supports, make_kernel<CudaArg>);
TWINFER_REGISTER_KERNEL("ArgMin", Backend::kCUDA, 0, arg_supports, make_kernel<CudaArg>);

}  // namespace twinfer::cuda
