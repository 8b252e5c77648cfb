// BatchNormalization (inference) on CUDA, where it is not folded into a Conv:
// per channel (dim 1) y = a[c] * x + s[c], with a = scale / sqrt(var + eps)
// and s = B - mean * a computed once on the host from constant parameters
// (on the device each run for parameters that are not constants), in float
// as the CPU kernel (ops/nn/batchnorm.cc) computes them, and rounded as it
// rounds (a product, then a sum: no fma). One grid-stride
// kernel over the elements; the channel of element i is (i / plane) % C.
#include <cmath>
#include <vector>

#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/kernel_util.h"

namespace twinfer_gpu {

template <typename T>
__global__ void batchnorm_affine(int64_t n, int64_t plane, int64_t channels, const T* __restrict__ x,
                                 const float* __restrict__ a, const float* __restrict__ s, T* __restrict__ y) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t c = (i / plane) % channels;
    y[i] = twinfer::ew::store<T>(__fadd_rn(__fmul_rn(a[c], twinfer::ew::load(x[i])), s[c]));
  }
}

// The coefficients on the device, for parameters that are not constants
// (graph inputs, computed values): the host's arithmetic, rounded as it rounds.
template <typename T>
__global__ void batchnorm_coefficients(int64_t channels, float eps, const T* __restrict__ scale,
                                       const T* __restrict__ bias, const T* __restrict__ mean,
                                       const T* __restrict__ var, float* __restrict__ a, float* __restrict__ s) {
  for (int64_t c = first_index(); c < channels; c += grid_stride()) {
    const float ac = __fdiv_rn(twinfer::ew::load(scale[c]), __fsqrt_rn(__fadd_rn(twinfer::ew::load(var[c]), eps)));
    a[c] = ac;
    s[c] = __fsub_rn(twinfer::ew::load(bias[c]), __fmul_rn(twinfer::ew::load(mean[c]), ac));
  }
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {
namespace {

constexpr unsigned kBatchNormTypes = ew::kF32 | ew::kF16 | ew::kBF16;

bool batchnorm_supports(const KernelBuildInfo& info, std::string* why) {
  if (!ew::check_input_dtype(info, 0, kBatchNormTypes, why)) return false;
  const graph::Node& n = info.node();
  bool extra = false;
  for (size_t i = 1; i < info.num_outputs(); ++i) extra = extra || info.has_output(i);
  if (n.attr_int("training_mode", 0) != 0 || n.attr_int("spatial", 1) != 1 || extra) {
    if (why) *why = "BatchNormalization's training mode and spatial=0 have no CUDA kernel";
    return false;
  }
  for (size_t i = 1; i < 5; ++i)
    if (!info.has_input(i) || info.input_dtype(i) != info.input_dtype(0)) {
      if (why) *why = "the CUDA BatchNormalization needs scale, B, mean and var of x's type";
      return false;
    }
  const Shape x = info.input_shape(0);
  if (x.size() < 2) {
    if (why) *why = "BatchNormalization needs rank >= 2";
    return false;
  }
  for (size_t i = 1; i < 5; ++i)
    if (info.input_shape(i) != Shape{x[1]}) {
      if (why) *why = "BatchNormalization's parameters must have shape [C]";
      return false;
    }
  return true;
}

class CudaBatchNorm final : public Kernel {
 public:
  explicit CudaBatchNorm(const KernelBuildInfo& info) : dtype_(info.input_dtype(0)) {
    const Shape x = info.input_shape(0);
    channels_ = x[1];
    n_ = shape_numel(x);
    for (size_t d = 2; d < x.size(); ++d) plane_ *= x[d];
    eps_ = info.node().attr_float("epsilon", 1e-5f);
    const float eps = eps_;
    for (size_t i = 1; i < 5; ++i) on_device_ = on_device_ || !info.input_constant(i);
    if (on_device_) return;  // batchnorm_coefficients, each run, into scratch
    std::vector<float> a(static_cast<size_t>(channels_)), s(static_cast<size_t>(channels_));
    ew::dispatch_typeset<kBatchNormTypes>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      auto at = [&](size_t input, int64_t c) {
        return static_cast<float>(ew::load(info.input_constant(input)->data_as<T>()[c]));
      };
      for (int64_t c = 0; c < channels_; ++c) {
        a[c] = at(1, c) / std::sqrt(at(4, c) + eps);
        const volatile float mean_a = at(3, c) * a[c];  // rounded apart, as the CPU (no fma contraction)
        s[c] = at(2, c) - mean_a;
      }
    });
    a_ = device_copy(a.data(), DType::kFloat32, {channels_});
    s_ = device_copy(s.data(), DType::kFloat32, {channels_});
  }

  size_t scratch_bytes() const override { return on_device_ ? 2 * channels_ * sizeof(float) : 0; }
  void run(KernelContext& ctx) const override {
    const ew::LaunchConfig lc = ew::elementwise_launch(n_);
    if (!lc.blocks) return;
    const cudaStream_t st = stream_of(ctx);
    const float* a = a_.data_as<float>();
    const float* sh = s_.data_as<float>();
    if (on_device_) {
      float* scratch = static_cast<float*>(ctx.scratch);
      const ew::LaunchConfig cc = ew::elementwise_launch(channels_);
      ew::dispatch_typeset<kBatchNormTypes>(dtype_, [&](auto tag) {
        using T = typename decltype(tag)::type;
        twinfer_gpu::batchnorm_coefficients<<<cc.blocks, cc.threads, 0, st>>>(
            channels_, eps_, ctx.inputs[1].as<const T>(), ctx.inputs[2].as<const T>(), ctx.inputs[3].as<const T>(),
            ctx.inputs[4].as<const T>(), scratch, scratch + channels_);
      });
      a = scratch;
      sh = scratch + channels_;
    }
    ew::dispatch_typeset<kBatchNormTypes>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      twinfer_gpu::batchnorm_affine<<<lc.blocks, lc.threads, 0, st>>>(
          n_, plane_ > 0 ? plane_ : 1, channels_, ctx.inputs[0].as<const T>(), a, sh, ctx.outputs[0].as<T>());
    });
    check_launch("BatchNormalization launch");
  }
  const char* impl_name() const override { return "cuda elementwise"; }

 private:
  DType dtype_;
  int64_t channels_ = 0, n_ = 0, plane_ = 1;
  float eps_ = 1e-5f;
  bool on_device_ = false;  // parameters that are not constants: coefficients computed each run
  Tensor a_, s_;
};

}  // namespace

TWINFER_REGISTER_KERNEL("BatchNormalization", Backend::kCUDA, 0, batchnorm_supports, make_kernel<CudaBatchNorm>);

}  // namespace twinfer::cuda
