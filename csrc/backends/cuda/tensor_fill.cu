// Ops that write each output element from a little index arithmetic, on
// CUDA, a thread per output element with the CPU kernels' rules
// (ops/tensor/onehot.cc, eyelike.cc, reverse_sequence.cc,
// center_crop_pad.cc):
// - OneHot: indices of any numeric type (floats truncated), negative ones
//   count from depth, out of range ones give an all-"off" line; depth from
//   the planned output shape, off/on read on the device.
// - EyeLike: ones on the k-th diagonal, zeros elsewhere, in the output dtype.
// - ReverseSequence: batch/time axes 0 and 1 in either order; a sequence
//   length outside [0, time] sets the kernel error flag (error_flag.h).
// - CenterCropPad: the overlap of input and output copied, the rest zero.
// Elements move by their width (1, 2, 4 or 8 bytes); strings stay on the CPU.
#include <algorithm>
#include <string>
#include <vector>

#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/error_flag.h"
#include "backends/cuda/kernel_util.h"
#include "ops/elementwise/offset_calc.h"
#include "ops/tensor/tensor_util.h"

namespace twinfer_gpu {

// OneHot: output [outer, depth, inner] from indices [outer, inner].
template <typename I, typename U>
__global__ void onehot(int64_t n, twinfer::ew::FastDivmod inner, twinfer::ew::FastDivmod depth,
                       const I* __restrict__ ind, const U* __restrict__ vals, U* __restrict__ y) {
  const U off = vals[0], on = vals[1];
  const int64_t D = static_cast<int64_t>(depth.divisor);
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    uint64_t q, r, o, k;
    inner.divmod(static_cast<uint64_t>(i), q, r);
    depth.divmod(q, o, k);
    int64_t v = static_cast<int64_t>(twinfer::ew::load(ind[o * inner.divisor + r]));
    if (v < 0) v += D;
    y[i] = v == static_cast<int64_t>(k) ? on : off;
  }
}

template <typename T>
__global__ void eyelike(int64_t n, twinfer::ew::FastDivmod cols, int64_t k, T one, T* __restrict__ y) {
  for (int64_t t = first_index(); t < n; t += grid_stride()) {
    uint64_t i, j;
    cols.divmod(static_cast<uint64_t>(t), i, j);
    y[t] = static_cast<int64_t>(j) - static_cast<int64_t>(i) == k ? one : T{};
  }
}

// ReverseSequence: [d0, d1, inner] with (batch, time) = (d0, d1) or (d1, d0).
template <typename U, typename L>
__global__ void reverse_sequence(int64_t n, twinfer::ew::FastDivmod inner, twinfer::ew::FastDivmod d1,
                                 bool batch_first, int64_t time, const L* __restrict__ lens,
                                 const U* __restrict__ x, U* __restrict__ y, int* error) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    uint64_t q, r, a0, a1;
    inner.divmod(static_cast<uint64_t>(i), q, r);
    d1.divmod(q, a0, a1);
    const int64_t b = static_cast<int64_t>(batch_first ? a0 : a1), t = static_cast<int64_t>(batch_first ? a1 : a0);
    const int64_t len = static_cast<int64_t>(lens[b]);
    if (len < 0 || len > time) {
      *error = twinfer::cuda::kIndexOutOfRange;
      continue;
    }
    const int64_t st = t < len ? len - 1 - t : t;
    const int64_t s0 = batch_first ? b : st, s1 = batch_first ? st : b;
    y[i] = x[(s0 * static_cast<int64_t>(d1.divisor) + s1) * static_cast<int64_t>(inner.divisor) +
             static_cast<int64_t>(r)];
  }
}

// CenterCropPad: per dim (innermost first) the output size, where the copied
// window starts in the output (dst) and its length (len), the input stride
// and the input coordinate of the window's start (src).
struct CropGeom {
  int rank = 0;
  twinfer::ew::FastDivmod out[8];
  int64_t dst[8] = {}, len[8] = {}, src[8] = {}, in_stride[8] = {};
};

template <typename U>
__global__ void center_crop_pad(int64_t n, CropGeom g, const U* __restrict__ x, U* __restrict__ y) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    uint64_t rest = static_cast<uint64_t>(i);
    int64_t at = 0;
    bool inside = true;
    for (int d = 0; d < g.rank; ++d) {
      uint64_t q, r;
      g.out[d].divmod(rest, q, r);
      rest = q;
      const int64_t o = static_cast<int64_t>(r) - g.dst[d];
      inside = inside && o >= 0 && o < g.len[d];
      at += (o + g.src[d]) * g.in_stride[d];
    }
    y[i] = inside ? x[at] : U{};
  }
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {
namespace {

bool width_ok(DType dt) {
  const size_t w = dtype_size(dt);
  return dt != DType::kString && dt != DType::kUndefined && (w == 1 || w == 2 || w == 4 || w == 8);
}

// ---- OneHot --------------------------------------------------------------------

bool onehot_supports(const KernelBuildInfo& info, std::string* why) {
  if (!ew::check_input_dtype(info, 0, ew::kNumericTypes, why)) return false;
  if (!width_ok(info.input_dtype(2))) {
    if (why) *why = std::string("OneHot values of ") + dtype_name(info.input_dtype(2)) + " have no CUDA kernel";
    return false;
  }
  return true;
}

class CudaOneHot final : public Kernel {
 public:
  explicit CudaOneHot(const KernelBuildInfo& info)
      : index_(info.input_dtype(0)), elem_(dtype_size(info.input_dtype(2))) {
    const Shape out = info.output_shape(0);
    const int64_t r = static_cast<int64_t>(out.size());
    int64_t axis = info.node().attr_int("axis", -1);
    if (axis < 0) axis += r;
    if (axis < 0 || axis >= r) info.fail(ErrorKind::kShape, "OneHot axis out of range");
    depth_ = out[axis];
    for (int64_t d = axis + 1; d < r; ++d) inner_ *= out[d];
    n_ = shape_numel(out);
  }
  void run(KernelContext& ctx) const override {
    const ew::LaunchConfig lc = ew::elementwise_launch(n_);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    const ew::FastDivmod inner(static_cast<uint64_t>(inner_)), depth(static_cast<uint64_t>(depth_));
    ew::dispatch_typeset<ew::kNumericTypes>(index_, [&](auto itag) {
      using I = typename decltype(itag)::type;
      dispatch_width(elem_, [&](auto tag) {
        using U = decltype(tag);
        twinfer_gpu::onehot<<<lc.blocks, lc.threads, 0, s>>>(n_, inner, depth, ctx.inputs[0].as<const I>(),
                                                             static_cast<const U*>(ctx.inputs[2].data),
                                                             static_cast<U*>(ctx.outputs[0].data));
      });
    });
    check_launch("OneHot launch");
  }
  const char* impl_name() const override { return "cuda onehot"; }

 private:
  DType index_;
  size_t elem_;
  int64_t depth_ = 0, inner_ = 1, n_ = 0;
};

// ---- EyeLike -------------------------------------------------------------------

bool eyelike_supports(const KernelBuildInfo& info, std::string* why) {
  const DType dt = info.output(0).dtype;
  if (!ew::in_typeset(ew::kAllTypes, dt)) {
    if (why) *why = std::string("EyeLike of ") + dtype_name(dt) + " has no CUDA kernel";
    return false;
  }
  return true;
}

class CudaEyeLike final : public Kernel {
 public:
  explicit CudaEyeLike(const KernelBuildInfo& info) : dtype_(info.output(0).dtype), k_(info.node().attr_int("k", 0)) {
    const Shape out = info.output_shape(0);
    if (out.size() != 2) info.fail(ErrorKind::kShape, "EyeLike needs a 2-D input");
    cols_ = out[1];
    n_ = out[0] * out[1];
  }
  void run(KernelContext& ctx) const override {
    const ew::LaunchConfig lc = ew::elementwise_launch(n_);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    const ew::FastDivmod cols(static_cast<uint64_t>(cols_));
    ew::dispatch_typeset<ew::kAllTypes>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T one;
      if constexpr (ew::is_half_v<T>) one = ew::store<T>(1.0f);
      else one = static_cast<T>(1);
      twinfer_gpu::eyelike<<<lc.blocks, lc.threads, 0, s>>>(n_, cols, k_, one, ctx.outputs[0].as<T>());
    });
    check_launch("EyeLike launch");
  }
  const char* impl_name() const override { return "cuda eyelike"; }

 private:
  DType dtype_;
  int64_t k_, cols_ = 1, n_ = 0;
};

// ---- ReverseSequence -----------------------------------------------------------

bool reverse_sequence_supports(const KernelBuildInfo& info, std::string* why) {
  if (!width_ok(info.input_dtype(0))) {
    if (why) *why = std::string("ReverseSequence of ") + dtype_name(info.input_dtype(0)) + " has no CUDA kernel";
    return false;
  }
  return tensor::check_index_dtype(info, 1, why);
}

class CudaReverseSequence final : public Kernel {
 public:
  explicit CudaReverseSequence(const KernelBuildInfo& info)
      : elem_(dtype_size(info.input_dtype(0))), lens_(info.input_dtype(1)) {
    const int64_t ba = info.node().attr_int("batch_axis", 1), ta = info.node().attr_int("time_axis", 0);
    if (!((ba == 0 && ta == 1) || (ba == 1 && ta == 0)))
      info.fail(ErrorKind::kInvalidArgument, "batch_axis and time_axis must be 0 and 1 in some order");
    const Shape s = info.input_shape(0);
    if (s.size() < 2) info.fail(ErrorKind::kShape, "ReverseSequence needs rank >= 2");
    batch_first_ = ba == 0;
    d1_ = s[1];
    time_ = s[ta];
    for (size_t d = 2; d < s.size(); ++d) inner_ *= s[d];
    n_ = shape_numel(s);
    if (shape_numel(info.input_shape(1)) != s[ba]) info.fail(ErrorKind::kShape, "sequence_lens must have batch entries");
  }
  void run(KernelContext& ctx) const override {
    const ew::LaunchConfig lc = ew::elementwise_launch(n_);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    int* error = kernel_error_flag(ctx.backend_state);
    const ew::FastDivmod inner(static_cast<uint64_t>(inner_)), d1(static_cast<uint64_t>(d1_));
    dispatch_width(elem_, [&](auto tag) {
      using U = decltype(tag);
      auto go = [&](auto ltag) {
        using L = decltype(ltag);
        twinfer_gpu::reverse_sequence<<<lc.blocks, lc.threads, 0, s>>>(
            n_, inner, d1, batch_first_, time_, ctx.inputs[1].as<const L>(), static_cast<const U*>(ctx.inputs[0].data),
            static_cast<U*>(ctx.outputs[0].data), error);
      };
      if (lens_ == DType::kInt64) go(int64_t{});
      else go(int32_t{});
    });
    check_launch("ReverseSequence launch");
  }
  const char* impl_name() const override { return "cuda reverse sequence"; }

 private:
  size_t elem_;
  DType lens_;
  bool batch_first_ = false;
  int64_t d1_ = 1, time_ = 0, inner_ = 1, n_ = 0;
};

// ---- CenterCropPad -------------------------------------------------------------

bool ccp_supports(const KernelBuildInfo& info, std::string* why) {
  if (!width_ok(info.input_dtype(0))) {
    if (why) *why = std::string("CenterCropPad of ") + dtype_name(info.input_dtype(0)) + " has no CUDA kernel";
    return false;
  }
  if (info.input_shape(0).size() > 8) {
    if (why) *why = "CenterCropPad of rank > 8 has no CUDA kernel";
    return false;
  }
  return tensor::check_index_dtype(info, 1, why);
}

class CudaCenterCropPad final : public Kernel {
 public:
  explicit CudaCenterCropPad(const KernelBuildInfo& info) : elem_(dtype_size(info.input_dtype(0))) {
    const Shape in = info.input_shape(0), out = info.output_shape(0);
    if (in.size() != out.size()) info.fail(ErrorKind::kShape, "CenterCropPad keeps the rank");
    const Shape is = contiguous_strides(in);
    const int r = static_cast<int>(in.size());
    g_.rank = r;
    for (int d = 0; d < r; ++d) {
      const int from = r - 1 - d;
      const int64_t a = in[from], b = out[from];
      g_.out[d] = ew::FastDivmod(static_cast<uint64_t>(b > 0 ? b : 1));
      g_.len[d] = std::min(a, b);
      g_.src[d] = a > b ? (a - b) / 2 : 0;
      g_.dst[d] = b > a ? (b - a) / 2 : 0;
      g_.in_stride[d] = is[from];
    }
    n_ = shape_numel(out);
  }
  void run(KernelContext& ctx) const override {
    const ew::LaunchConfig lc = ew::elementwise_launch(n_);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    dispatch_width(elem_, [&](auto tag) {
      using U = decltype(tag);
      twinfer_gpu::center_crop_pad<<<lc.blocks, lc.threads, 0, s>>>(
          n_, g_, static_cast<const U*>(ctx.inputs[0].data), static_cast<U*>(ctx.outputs[0].data));
    });
    check_launch("CenterCropPad launch");
  }
  const char* impl_name() const override { return "cuda center crop pad"; }

 private:
  size_t elem_;
  twinfer_gpu::CropGeom g_;
  int64_t n_ = 0;
};

}  // namespace

TWINFER_REGISTER_KERNEL("OneHot", Backend::kCUDA, 0, onehot_supports, make_kernel<CudaOneHot>);
TWINFER_REGISTER_KERNEL("EyeLike", Backend::kCUDA, 0, eyelike_supports, make_kernel<CudaEyeLike>);
TWINFER_REGISTER_KERNEL("ReverseSequence", Backend::kCUDA, 0, reverse_sequence_supports,
                        make_kernel<CudaReverseSequence>);
TWINFER_REGISTER_KERNEL("CenterCropPad", Backend::kCUDA, 0, ccp_supports, make_kernel<CudaCenterCropPad>);

}  // namespace twinfer::cuda
