// CumSum / CumProd on CUDA (exclusive, reverse) along an axis given as a
// constant or read on the device: the tensor seen as [outer, n, inner], one thread per (outer,
// inner) position runs along its n values in the CPU kernel's order and in
// its accumulation type (ops/tensor/cumulative.cc: the element type, float
// for float16/bfloat16), so both give the same sums. Consecutive threads read
// consecutive inner positions. (RoBERTa-style exports number positions with a
// CumSum of the attention mask.)
#include <vector>

#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/error_flag.h"
#include "backends/cuda/kernel_util.h"
#include "ops/tensor/tensor_util.h"

namespace twinfer_gpu {

// One lane (o, j) of [outer, n, inner]: its n values in the CPU's order.
template <typename T, bool kProd>
__device__ void scan_lane(int64_t o, int64_t j, int64_t n, int64_t inner, bool exclusive, bool reverse,
                          const T* __restrict__ x, T* __restrict__ y) {
  using C = decltype(twinfer::ew::load(x[0]));
  C acc = kProd ? C(1) : C(0);
  for (int64_t s = 0; s < n; ++s) {
    const int64_t k = reverse ? n - 1 - s : s;
    const int64_t at = (o * n + k) * inner + j;
    const C v = twinfer::ew::load(x[at]);
    if (exclusive) y[at] = twinfer::ew::store<T>(acc);
    acc = kProd ? static_cast<C>(acc * v) : static_cast<C>(acc + v);
    if (!exclusive) y[at] = twinfer::ew::store<T>(acc);
  }
}

template <typename T, bool kProd>
__global__ void cumulative_scan(int64_t lanes, int64_t n, int64_t inner, bool exclusive, bool reverse,
                                const T* __restrict__ x, T* __restrict__ y) {
  for (int64_t t = first_index(); t < lanes; t += grid_stride())
    scan_lane<T, kProd>(t / inner, t % inner, n, inner, exclusive, reverse, x, y);
}

// The same scan with the axis read on the device (a graph input or a
// computed value: no trip to the host for it). The geometry follows from the
// shape and the axis in every thread; the grid covers the most lanes any axis
// could give (numel), the threads past this axis's lanes do nothing.
struct ScanDims {
  int rank = 0;
  int64_t d[twinfer::ew::kMaxOffsetDims] = {};
};

template <typename T, bool kProd, typename I>
__global__ void cumulative_scan_axis_on_device(int64_t numel, ScanDims dims, const I* __restrict__ axis_p,
                                               bool exclusive, bool reverse, const T* __restrict__ x,
                                               T* __restrict__ y, int* error) {
  int64_t a = static_cast<int64_t>(*axis_p);
  if (a < -dims.rank || a >= dims.rank) {
    if (first_index() == 0) *error = twinfer::cuda::kAxisOutOfRange;
    return;
  }
  if (a < 0) a += dims.rank;
  const int64_t n = dims.d[a];
  int64_t inner = 1;
  for (int d = static_cast<int>(a) + 1; d < dims.rank; ++d) inner *= dims.d[d];
  if (n == 0) return;
  const int64_t lanes = numel / n;
  for (int64_t t = first_index(); t < lanes; t += grid_stride())
    scan_lane<T, kProd>(t / inner, t % inner, n, inner, exclusive, reverse, x, y);
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {
namespace {

constexpr unsigned kCumulativeTypes = ew::kF32 | ew::kF16 | ew::kBF16 | ew::kF64 | ew::kI32 | ew::kI64;

// A constant axis is read when the kernel is built; any other axis (int32
// or int64, one value) by the kernel on the device.
bool cumulative_supports(const KernelBuildInfo& info, std::string* why) {
  if (!ew::check_input_dtype(info, 0, kCumulativeTypes, why)) return false;
  std::vector<int64_t> axis;
  const int64_t r = static_cast<int64_t>(info.input_shape(0).size());
  if (tensor::const_ints(info, 1, &axis)) {
    if (axis.size() == 1 && axis[0] >= -r && axis[0] < r) return true;
    if (why) *why = "CumSum/CumProd's constant axis must be one value in range";
    return false;
  }
  if (r > ew::kMaxOffsetDims || shape_numel(info.input_shape(1)) != 1) {
    if (why) *why = "an axis given at run time needs one value and a rank of at most " +
                    std::to_string(ew::kMaxOffsetDims) + " on CUDA";
    return false;
  }
  return true;
}

template <bool kProd>
class CudaCumulative final : public Kernel {
 public:
  explicit CudaCumulative(const KernelBuildInfo& info)
      : dtype_(info.input_dtype(0)), exclusive_(info.node().attr_int("exclusive", 0) != 0),
        reverse_(info.node().attr_int("reverse", 0) != 0) {
    const Shape x = info.input_shape(0);
    numel_ = shape_numel(x);
    std::vector<int64_t> axis;
    if (!tensor::const_ints(info, 1, &axis)) {  // read on the device (cumulative_supports)
      axis_on_device_ = true;
      axis_dtype_ = info.input_dtype(1);
      dims_.rank = static_cast<int>(x.size());
      for (size_t d = 0; d < x.size(); ++d) dims_.d[d] = x[d];
      return;
    }
    const int64_t a = axis[0] < 0 ? axis[0] + static_cast<int64_t>(x.size()) : axis[0];
    int64_t outer = 1;
    for (int64_t d = 0; d < a; ++d) outer *= x[d];
    n_ = x[a];
    for (size_t d = a + 1; d < x.size(); ++d) inner_ *= x[d];
    lanes_ = outer * inner_;
  }

  void run(KernelContext& ctx) const override {
    if (axis_on_device_) return run_axis_on_device(ctx);
    const ew::LaunchConfig lc = ew::elementwise_launch(lanes_);
    if (!lc.blocks || n_ == 0) return;
    const cudaStream_t s = stream_of(ctx);
    ew::dispatch_typeset<kCumulativeTypes>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      twinfer_gpu::cumulative_scan<T, kProd><<<lc.blocks, lc.threads, 0, s>>>(
          lanes_, n_, inner_, exclusive_, reverse_, ctx.inputs[0].as<const T>(), ctx.outputs[0].as<T>());
    });
    check_launch("CumSum/CumProd launch");
  }
  const char* impl_name() const override { return "cuda scan"; }

 private:
  void run_axis_on_device(KernelContext& ctx) const {
    const ew::LaunchConfig lc = ew::elementwise_launch(numel_);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    int* error = kernel_error_flag(ctx.backend_state);
    ew::dispatch_typeset<kCumulativeTypes>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      auto go = [&](const auto* axis) {
        twinfer_gpu::cumulative_scan_axis_on_device<T, kProd><<<lc.blocks, lc.threads, 0, s>>>(
            numel_, dims_, axis, exclusive_, reverse_, ctx.inputs[0].as<const T>(), ctx.outputs[0].as<T>(), error);
      };
      if (axis_dtype_ == DType::kInt32) go(ctx.inputs[1].as<const int32_t>());
      else go(ctx.inputs[1].as<const int64_t>());
    });
    check_launch("CumSum/CumProd launch");
  }

  DType dtype_;
  bool exclusive_, reverse_;
  int64_t n_ = 0, inner_ = 1, lanes_ = 0, numel_ = 0;
  bool axis_on_device_ = false;
  DType axis_dtype_ = DType::kInt64;
  twinfer_gpu::ScanDims dims_;
};

}  // namespace

TWINFER_REGISTER_KERNEL("CumSum", Backend::kCUDA, 0, cumulative_supports, make_kernel<CudaCumulative<false>>);
TWINFER_REGISTER_KERNEL("CumProd", Backend::kCUDA, 0, cumulative_supports, make_kernel<CudaCumulative<true>>);

}  // namespace twinfer::cuda
