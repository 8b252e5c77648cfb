// The normalisations over planes and groups on CUDA: InstanceNormalization
// and GroupNormalization (one kernel: a row is one (n, group) block of
// channels x spatial elements, InstanceNormalization having a group per
// channel) and RMSNormalization over trailing axes. One block per row, the
// CPU kernels' statistics (two passes for the mean and variance, as
// ops/nn/norm_stats.h; RMS: mean of squares), accumulated in float, and
// their rounding of the result (ops/nn/instancenorm.cc, ops/vision/lrn.cc,
// ops/transformer/normalization.cc).
#include <cmath>

#include "backends/cuda/block_reduce.cuh"
#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/kernel_util.h"

namespace twinfer_gpu {

// Rows of `cg` channels x `plane` elements, G rows a sample; channel c of
// row q is (q % G) * cg + j. y = a * x + s with a = inv * scale, s = bias -
// mean * a (scale / bias per channel, or per group when per_group_*).
template <typename T>
__global__ void group_norm_rows(int64_t rows, int64_t groups, int64_t cg, int64_t plane, const T* __restrict__ x,
                                const T* __restrict__ scale, const T* __restrict__ bias, bool per_group_scale,
                                bool per_group_bias, float eps, T* __restrict__ y) {
  __shared__ float sf[32];
  const int64_t len = cg * plane;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t g = r % groups;
    const T* xr = x + r * len;
    T* yr = y + r * len;
    float mean, m2;
    block_mean_m2(xr, len, sf, &mean, &m2);
    const float inv = 1.f / sqrtf(m2 / static_cast<float>(len) + eps);
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
      const int64_t c = g * cg + i / plane;
      const float sc = twinfer::ew::load(scale[per_group_scale ? g : c]);
      const float bi = twinfer::ew::load(bias[per_group_bias ? g : c]);
      const float a = inv * sc, sh = bi - mean * a;
      yr[i] = twinfer::ew::store<T>(a * twinfer::ew::load(xr[i]) + sh);
    }
  }
}

// RMSNormalization of contiguous rows of d: inv = 1 / sqrt(mean(x^2) + eps);
// the normalised value rounded to T, then multiplied by the scale.
template <typename T>
__global__ void rms_norm_rows(int64_t rows, int64_t d, const T* __restrict__ x, const T* __restrict__ scale, float eps,
                              T* __restrict__ y) {
  __shared__ float sf[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * d;
    T* yr = y + r * d;
    float q = 0.f;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      const float v = twinfer::ew::load(xr[i]);
      q += v * v;
    }
    const float inv = 1.f / sqrtf(block_reduce(q, SumOp{}, sf, 0.f) / static_cast<float>(d) + eps);
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      const float nv = twinfer::ew::load(twinfer::ew::store<T>(twinfer::ew::load(xr[i]) * inv));
      yr[i] = twinfer::ew::store<T>(nv * twinfer::ew::load(scale[i]));
    }
  }
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {
namespace {

constexpr unsigned kNormTypes = ew::kF32 | ew::kF16 | ew::kBF16;

uint32_t row_grid(int64_t rows) { return static_cast<uint32_t>(std::min<int64_t>(std::max<int64_t>(rows, 1), 1 << 20)); }

bool same_float_types(const KernelBuildInfo& info, size_t inputs, std::string* why) {
  for (size_t i = 0; i < inputs; ++i) {
    if (!ew::check_input_dtype(info, i, kNormTypes, why)) return false;
    if (info.input_dtype(i) != info.input_dtype(0)) {
      if (why) *why = info.node().op_type + " with inputs of different types has no CUDA kernel";
      return false;
    }
  }
  return true;
}

// ---- InstanceNormalization / GroupNormalization --------------------------------

bool group_norm_supports(const KernelBuildInfo& info, std::string* why) { return same_float_types(info, 3, why); }

class CudaGroupNorm final : public Kernel {
 public:
  explicit CudaGroupNorm(const KernelBuildInfo& info) : dtype_(info.input_dtype(0)) {
    const Shape x = info.input_shape(0);
    const bool instance = info.node().op_type == "InstanceNormalization";
    if (x.size() < (instance ? 3u : 2u)) info.fail(ErrorKind::kShape, "input must have rank >= " + std::to_string(instance ? 3 : 2));
    n_ = x[0];
    c_ = x[1];
    groups_ = instance ? c_ : info.node().attr_int("num_groups", 0);
    if (groups_ <= 0 || c_ % groups_ != 0)
      info.fail(ErrorKind::kShape, std::to_string(c_) + " channels do not split into " + std::to_string(groups_) + " groups");
    for (size_t i = 2; i < x.size(); ++i) plane_ *= x[i];
    for (size_t i = 1; i < 3; ++i) {
      const Shape s = info.input_shape(i);
      if (s.size() != 1 || (s[0] != c_ && (instance || s[0] != groups_)))
        info.fail(ErrorKind::kShape, std::string(i == 1 ? "scale" : "bias") + " must have shape [" + std::to_string(c_) +
                                         "], got " + shape_str(s));
      per_group_[i - 1] = s[0] != c_;
    }
    eps_ = info.node().attr_float("epsilon", 1e-5f);
  }
  void run(KernelContext& ctx) const override {
    const int64_t rows = n_ * groups_;
    if (rows == 0 || plane_ == 0 || c_ == 0) return;
    const cudaStream_t s = stream_of(ctx);
    ew::dispatch_typeset<kNormTypes>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      twinfer_gpu::group_norm_rows<<<row_grid(rows), twinfer_gpu::kRowThreads, 0, s>>>(
          rows, groups_, c_ / groups_, plane_, ctx.inputs[0].as<const T>(), ctx.inputs[1].as<const T>(),
          ctx.inputs[2].as<const T>(), per_group_[0], per_group_[1], eps_, ctx.outputs[0].as<T>());
    });
    check_launch("group normalization launch");
  }
  const char* impl_name() const override { return "cuda rows"; }

 private:
  DType dtype_;
  int64_t n_ = 0, c_ = 0, groups_ = 1, plane_ = 1;
  bool per_group_[2] = {false, false};
  float eps_ = 1e-5f;
};

// ---- RMSNormalization ------------------------------------------------------------

// Normalised axes from `axis` on; the scale as their trailing shape exactly
// (a scale broadcast over some of them stays on the CPU).
bool rms_geometry(const KernelBuildInfo& info, int64_t* outer, int64_t* inner, std::string* why) {
  const Shape x = info.input_shape(0);
  const int64_t rank = static_cast<int64_t>(x.size());
  int64_t axis = info.node().attr_int("axis", -1);
  if (rank < 1 || axis < -rank || axis >= rank) {
    if (why) *why = "axis out of range";
    return false;
  }
  if (axis < 0) axis += rank;
  *outer = 1;
  *inner = 1;
  for (int64_t i = 0; i < axis; ++i) *outer *= x[i];
  for (int64_t i = axis; i < rank; ++i) *inner *= x[i];
  const Shape sc = info.input_shape(1);
  bool exact = shape_numel(sc) == *inner && static_cast<int64_t>(sc.size()) <= rank - axis;
  for (size_t i = 0; exact && i < sc.size(); ++i) exact = sc[sc.size() - 1 - i] == x[x.size() - 1 - i];
  if (!exact && why) *why = "a scale broadcast over the normalised axes has no CUDA kernel";
  return exact;
}

bool rms_supports(const KernelBuildInfo& info, std::string* why) {
  int64_t outer = 0, inner = 0;
  return same_float_types(info, 2, why) && rms_geometry(info, &outer, &inner, why);
}

class CudaRMSNorm final : public Kernel {
 public:
  explicit CudaRMSNorm(const KernelBuildInfo& info) : dtype_(info.input_dtype(0)) {
    std::string why;
    if (!rms_geometry(info, &outer_, &inner_, &why)) info.fail(ErrorKind::kUnsupportedOp, why);
    eps_ = info.node().attr_float("epsilon", 1e-5f);
  }
  void run(KernelContext& ctx) const override {
    if (outer_ == 0 || inner_ == 0) return;
    const cudaStream_t s = stream_of(ctx);
    ew::dispatch_typeset<kNormTypes>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      twinfer_gpu::rms_norm_rows<<<row_grid(outer_), twinfer_gpu::kRowThreads, 0, s>>>(
          outer_, inner_, ctx.inputs[0].as<const T>(), ctx.inputs[1].as<const T>(), eps_, ctx.outputs[0].as<T>());
    });
    check_launch("RMSNormalization launch");
  }
  const char* impl_name() const override { return "cuda rows"; }

 private:
  DType dtype_;
  int64_t outer_ = 1, inner_ = 1;
  float eps_ = 1e-5f;
};

}  // namespace

TWINFER_REGISTER_KERNEL("InstanceNormalization", Backend::kCUDA, 0, group_norm_supports, make_kernel<CudaGroupNorm>);
TWINFER_REGISTER_KERNEL("GroupNormalization", Backend::kCUDA, 0, group_norm_supports, make_kernel<CudaGroupNorm>);
TWINFER_REGISTER_KERNEL("RMSNormalization", Backend::kCUDA, 0, rms_supports, make_kernel<CudaRMSNorm>);

}  // namespace twinfer::cuda
