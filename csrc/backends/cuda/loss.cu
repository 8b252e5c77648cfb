// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss on CUDA, with the
// CPU kernel's semantics (ops/loss/losses.cc): reductions none/sum/mean,
// optional weights, ignore_index, inputs [N, C] or [N, C, d1..dk], int32 or
// int64 targets, SCE's optional log_prob output; float32, float64, and
// float16/bfloat16 computed in float. Both backends check a node with
// ops/loss/loss_spec.h and compute each element with ops/loss/loss_math.h.
//
// One thread per target element k = (n, d): for SCE it takes the
// log-softmax of its row of C scores (D apart, so consecutive threads read
// consecutive addresses when there are spatial dims), writing log_prob when
// the node wants it, then the element's loss. Reduction none writes it;
// sum/mean add the losses and the weights of the elements not ignored in
// double over the block (block_reduce.cuh) into a partial pair per block in
// the kernel's scratch, and one block adds the pairs in a fixed order and
// writes sum or sum / weights (so a run's result does not depend on timing).
// A target out of [0, C) that is not ignore_index sets the context's error
// flag (error_flag.h: the run raises kInvalidArgument where the host waits)
// and counts as ignored; nothing is read out of bounds.
#include "backends/cuda/block_reduce.cuh"
#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/error_flag.h"
#include "backends/cuda/kernel_util.h"
#include "ops/loss/loss_math.h"
#include "ops/loss/loss_spec.h"

namespace twinfer_gpu {

struct LossArgs {
  int64_t rows = 0, C = 0, D = 1;  // target elements, classes, spatial size
  int64_t ignore = 0;
  bool has_ignore = false, sce = false;
};

// lp: SCE's log_prob output or null; partial: null for reduction none, else
// two doubles per block (sum of losses, sum of weights).
template <typename T, typename I>
__global__ void loss_rows(LossArgs a, const T* __restrict__ x, const I* __restrict__ t, const T* __restrict__ w,
                          T* __restrict__ y, T* __restrict__ lp, double* __restrict__ partial, int* error) {
  using A = twinfer::ew::compute_t<T>;
  using twinfer::loss::Target;
  double sum = 0.0, wsum = 0.0;
  for (int64_t k = first_index(); k < a.rows; k += grid_stride()) {
    const int64_t v = static_cast<int64_t>(t[k]);
    const Target kind = twinfer::loss::target_kind(v, a.C, a.has_ignore, a.ignore);
    if (kind == Target::kOutOfRange) *error = twinfer::cuda::kTargetOutOfRange;
    const int64_t row = twinfer::loss::class_offset(k, 0, a.C, a.D);
    A lse = 0;
    if (a.sce) {
      lse = twinfer::loss::log_sum_exp(x + row, a.C, a.D);
      if (lp)
        for (int64_t c = 0; c < a.C; ++c) lp[row + c * a.D] = twinfer::loss::log_prob(x[row + c * a.D], lse);
    }
    A l = 0;
    if (kind == Target::kUsed) {
      const T xv = x[twinfer::loss::class_offset(k, v, a.C, a.D)];
      const A wt = w ? static_cast<A>(twinfer::ew::load(w[v])) : A(1);
      l = twinfer::loss::nll_term(a.sce ? twinfer::loss::log_prob(xv, lse) : xv, wt);
      wsum += static_cast<double>(wt);
    }
    if (partial) sum += static_cast<double>(l);
    else y[k] = twinfer::ew::store<T>(l);
  }
  if (partial) {  // the same for the whole block: every thread reaches the reductions
    __shared__ double sh[32];
    sum = block_reduce(sum, SumOp{}, sh, 0.0);
    wsum = block_reduce(wsum, SumOp{}, sh, 0.0);
    if (threadIdx.x == 0) {
      partial[2 * blockIdx.x] = sum;
      partial[2 * blockIdx.x + 1] = wsum;
    }
  }
}

// One block: the blocks' pairs in a fixed order, then y[0] = sum or the mean.
template <typename T>
__global__ void loss_reduce(int64_t parts, const double* __restrict__ partial, twinfer::loss::Reduction red,
                            T* __restrict__ y) {
  __shared__ double sh[32];
  double s = 0.0, w = 0.0;
  for (int64_t i = threadIdx.x; i < parts; i += blockDim.x) {
    s += partial[2 * i];
    w += partial[2 * i + 1];
  }
  s = block_reduce(s, SumOp{}, sh, 0.0);
  w = block_reduce(w, SumOp{}, sh, 0.0);
  if (threadIdx.x == 0) y[0] = twinfer::ew::store<T>(twinfer::loss::reduce_loss(s, w, red));
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {
namespace {

using loss::kLossTypes;
using loss::LossSpec;
using loss::Reduction;

// Blocks of the reducing launch at most (each thread then loops over rows):
// the partial pairs fit a fixed 16 KiB of scratch, and the order of the sums
// depends only on the shape, not on the device.
constexpr uint32_t kMaxReduceBlocks = 1024;

// Dtypes are all it refuses (with the reason): every shape the CPU kernel
// accepts runs here, and a shape the node cannot have (a target that does not
// match the input, weights not [C]) fails when the kernel is built, with the
// CPU kernel's message (loss_spec.h), on either backend.
bool loss_supports(const KernelBuildInfo& info, std::string* why) { return loss::loss_dtypes_supported(info, why); }

class CudaLoss final : public Kernel {
 public:
  explicit CudaLoss(const KernelBuildInfo& info)
      : s_(info), dtype_(info.input_dtype(0)), index_(info.input_dtype(1)),
        lc_(ew::elementwise_launch(s_.elements(), 256,
                                   s_.red == Reduction::kNone ? (1u << 20) : kMaxReduceBlocks)) {}

  size_t scratch_bytes() const override {
    return s_.red == Reduction::kNone ? 0 : 2 * sizeof(double) * (lc_.blocks ? lc_.blocks : 1);
  }

  void run(KernelContext& ctx) const override {
    const cudaStream_t st = stream_of(ctx);
    int* error = kernel_error_flag(ctx.backend_state);
    twinfer_gpu::LossArgs a;
    a.rows = s_.elements();
    a.C = s_.C;
    a.D = s_.D;
    a.ignore = s_.ignore;
    a.has_ignore = s_.has_ignore;
    a.sce = s_.sce;
    double* partial = s_.red == Reduction::kNone ? nullptr : static_cast<double*>(ctx.scratch);
    ew::dispatch_typeset<kLossTypes>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = ctx.inputs[0].as<const T>();
      const T* w = s_.has_weight ? ctx.inputs[2].as<const T>() : nullptr;
      T* y = ctx.outputs[0].as<T>();
      T* lp = s_.want_log_prob ? ctx.outputs[1].as<T>() : nullptr;
      if (lc_.blocks) {
        if (index_ == DType::kInt32)
          twinfer_gpu::loss_rows<<<lc_.blocks, lc_.threads, 0, st>>>(a, x, ctx.inputs[1].as<const int32_t>(), w, y,
                                                                     lp, partial, error);
        else
          twinfer_gpu::loss_rows<<<lc_.blocks, lc_.threads, 0, st>>>(a, x, ctx.inputs[1].as<const int64_t>(), w, y,
                                                                     lp, partial, error);
        check_launch("NegativeLogLikelihoodLoss/SoftmaxCrossEntropyLoss launch");
      }
      if (partial) {  // also with no elements: the sum is 0, the mean 0 / 0
        twinfer_gpu::loss_reduce<<<1, twinfer_gpu::kRowThreads, 0, st>>>(static_cast<int64_t>(lc_.blocks), partial,
                                                                          s_.red, y);
        check_launch("NegativeLogLikelihoodLoss/SoftmaxCrossEntropyLoss reduce launch");
      }
    });
  }
  const char* impl_name() const override { return "cuda rows"; }

 private:
  LossSpec s_;
  DType dtype_, index_;
  ew::LaunchConfig lc_;
};

}  // namespace

TWINFER_REGISTER_KERNEL("NegativeLogLikelihoodLoss", Backend::kCUDA, 0, loss_supports, make_kernel<CudaLoss>);
TWINFER_REGISTER_KERNEL("SoftmaxCrossEntropyLoss", Backend::kCUDA, 0, loss_supports, make_kernel<CudaLoss>);

}  // namespace twinfer::cuda
