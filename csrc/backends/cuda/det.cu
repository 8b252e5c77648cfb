// Det on CUDA: a thread per matrix, each factorising its own double copy in
// the step's scratch with the CPU kernel's routine (ops/tensor/det_lu.h), so
// both pivot and round alike. Det's batches are small matrices (2x2 to a
// few dozen), where one thread per matrix is the whole job; larger ones
// (m^3 dependent steps in one thread) stay on the CPU.
#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/kernel_util.h"
#include "ops/tensor/det_lu.h"
#include "ops/tensor/tensor_util.h"

namespace twinfer_gpu {

template <typename T>
__global__ void det_batch(int64_t batch, int64_t m, const T* __restrict__ x, double* __restrict__ work,
                          T* __restrict__ y) {
  const int64_t mm = m * m;
  for (int64_t b = first_index(); b < batch; b += grid_stride()) {
    double* a = work + b * mm;
    for (int64_t i = 0; i < mm; ++i) a[i] = static_cast<double>(twinfer::ew::load(x[b * mm + i]));
    const double det = twinfer::tensor::lu_determinant(a, m);
    y[b] = twinfer::ew::store<T>(static_cast<twinfer::ew::compute_t<T>>(det));
  }
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {
namespace {

constexpr int64_t kMaxDetOrder = 64;

bool det_supports(const KernelBuildInfo& info, std::string* why) {
  if (!ew::check_input_dtype(info, 0, ew::kFloatTypes, why)) return false;
  const SymShape& s = info.input(0).shape;
  if (!s.empty() && s.back().known() && s.back().value > kMaxDetOrder) {
    if (why) *why = "Det of " + std::to_string(s.back().value) + "x" + std::to_string(s.back().value) +
                    " matrices runs on the CPU (the CUDA kernel is a thread per matrix, up to " +
                    std::to_string(kMaxDetOrder) + "x" + std::to_string(kMaxDetOrder) + ")";
    return false;
  }
  return true;
}

class DetKernel final : public Kernel {
 public:
  explicit DetKernel(const KernelBuildInfo& info) : dtype_(info.input_dtype(0)) {
    const Shape s = info.input_shape(0);
    if (s.size() < 2 || s[s.size() - 2] != s.back())
      info.fail(ErrorKind::kShape, "input " + shape_str(s) + " must end in square matrices");
    m_ = s.back();
    batch_ = shape_numel(Shape(s.begin(), s.end() - 2));
  }
  size_t scratch_bytes() const override { return static_cast<size_t>(batch_ * m_ * m_) * sizeof(double); }
  void run(KernelContext& ctx) const override {
    const ew::LaunchConfig lc = ew::elementwise_launch(batch_);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    ew::dispatch_typeset<ew::kFloatTypes>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      twinfer_gpu::det_batch<<<lc.blocks, lc.threads, 0, s>>>(batch_, m_, ctx.inputs[0].as<const T>(),
                                                              static_cast<double*>(ctx.scratch), ctx.outputs[0].as<T>());
    });
    check_launch("Det kernel launch");
  }
  const char* impl_name() const override { return "cuda det (a thread per matrix)"; }

 private:
  DType dtype_;
  int64_t m_ = 0, batch_ = 1;
};

}  // namespace

TWINFER_REGISTER_KERNEL("Det", Backend::kCUDA, 0, det_supports, make_kernel<DetKernel>);

}  // namespace twinfer::cuda
