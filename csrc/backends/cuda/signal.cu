// DFT and STFT on CUDA: a thread per output value runs the CPU kernel's
// direct sum over the same double-precision twiddles (ops/signal/dft_plan.h,
// computed on the host once and uploaded when the kernel is built), reading
// its line straight from the input (no staging copy). These ops are rare in
// inference graphs; this is their correct path, not a fast one.
#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/kernel_util.h"
#include "ops/elementwise/typeset.h"
#include "ops/signal/dft_plan.h"

namespace twinfer_gpu {

// Value j of a line: x[base + j * stride] (and the next element when complex),
// times the window's value j when there is one; zero past `valid`.
template <typename T>
struct LineAt {
  const T* x;
  int64_t base, stride, valid;
  bool complex;
  const T* w;
  __device__ void operator()(int64_t j, double* r, double* i) const {
    if (j >= valid) {
      *r = *i = 0.0;
      return;
    }
    const double wv = w ? static_cast<double>(twinfer::ew::load(w[j])) : 1.0;
    const T* p = x + base + j * stride;
    *r = static_cast<double>(twinfer::ew::load(p[0])) * wv;
    *i = complex ? static_cast<double>(twinfer::ew::load(p[1])) * wv : 0.0;
  }
};

// DFT: output [outer, bins, inner, cout] from input [outer, m, inner, cin].
template <typename T>
__global__ void dft_values(int64_t lines, int64_t inner, int64_t m, int64_t n, int64_t bins, int64_t cin, bool irfft,
                           bool inverse, const double* __restrict__ tc, const double* __restrict__ ts,
                           const T* __restrict__ x, T* __restrict__ y) {
  using C = decltype(twinfer::ew::load(x[0]));
  const int64_t total = lines * bins;
  const double scale = inverse ? 1.0 / static_cast<double>(n) : 1.0;
  for (int64_t v = first_index(); v < total; v += grid_stride()) {
    const int64_t line = v / bins, k = v - line * bins;
    const int64_t o = line / inner, j = line - o * inner;
    const LineAt<T> get{x, (o * m * inner + j) * cin, inner * cin, m, cin == 2, nullptr};
    if (irfft) {
      const double s = twinfer::signal::irfft_sample(get, m, n, k, tc, ts);
      y[(o * bins + k) * inner + j] = twinfer::ew::store<T>(static_cast<C>(s));
    } else {
      double re, im;
      twinfer::signal::dft_bin(get, m, n, k, inverse ? 1 : -1, tc, ts, &re, &im);
      T* q = y + ((o * bins + k) * inner + j) * 2;
      q[0] = twinfer::ew::store<T>(static_cast<C>(re * scale));
      q[1] = twinfer::ew::store<T>(static_cast<C>(im * scale));
    }
  }
}

// STFT: output [batch, frames, bins, 2] from a signal [batch, len, cin].
template <typename T>
__global__ void stft_values(int64_t batch, int64_t frames, int64_t bins, int64_t len, int64_t cin, int64_t step,
                            int64_t n, const double* __restrict__ tc, const double* __restrict__ ts,
                            const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y) {
  using C = decltype(twinfer::ew::load(x[0]));
  const int64_t total = batch * frames * bins;
  for (int64_t v = first_index(); v < total; v += grid_stride()) {
    const int64_t k = v % bins, t = v / bins;
    const int64_t b = t / frames, f = t - b * frames;
    const int64_t start = f * step;
    const int64_t valid = len - start < n ? len - start : n;
    const LineAt<T> get{x, (b * len + start) * cin, cin, valid, cin == 2, w};
    double re, im;
    twinfer::signal::dft_bin(get, n, n, k, -1, tc, ts, &re, &im);
    y[v * 2] = twinfer::ew::store<T>(static_cast<C>(re));
    y[v * 2 + 1] = twinfer::ew::store<T>(static_cast<C>(im));
  }
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {
namespace {

using namespace twinfer::signal;
constexpr unsigned kSignalCudaTypes = ew::kFloatTypes & kCudaElementwiseTypes;

// The twiddles of n points on the device: cos then sin.
Tensor device_twiddles(int64_t n) {
  const Twiddles tw(n);
  std::vector<double> both(tw.c);
  both.insert(both.end(), tw.s.begin(), tw.s.end());
  return device_copy(both.data(), DType::kFloat64, {2 * n});
}

bool signal_supports(const KernelBuildInfo& info, std::string* why) {
  return ew::check_input_dtype(info, 0, kSignalCudaTypes, why);
}

class CudaDft final : public Kernel {
 public:
  explicit CudaDft(const KernelBuildInfo& info)
      : dtype_(info.input_dtype(0)), g_(dft_geometry(info)), tw_(device_twiddles(g_.n)) {}
  void run(KernelContext& ctx) const override {
    const ew::LaunchConfig lc = ew::elementwise_launch(g_.outer * g_.inner * g_.bins);
    if (!lc.blocks) return;
    const double* tc = tw_.data_as<double>();
    const cudaStream_t s = stream_of(ctx);
    ew::dispatch_typeset<kSignalCudaTypes>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      twinfer_gpu::dft_values<<<lc.blocks, lc.threads, 0, s>>>(
          g_.outer * g_.inner, g_.inner, g_.m, g_.n, g_.bins, g_.cin, g_.d.inverse && g_.d.onesided, g_.d.inverse, tc,
          tc + g_.n, ctx.inputs[0].as<const T>(), ctx.outputs[0].as<T>());
    });
    check_launch("DFT launch");
  }
  const char* impl_name() const override { return "cuda dft (direct sums)"; }

 private:
  DType dtype_;
  DftGeometry g_;
  Tensor tw_;
};

class CudaStft final : public Kernel {
 public:
  explicit CudaStft(const KernelBuildInfo& info)
      : dtype_(info.input_dtype(0)), g_(stft_geometry(info)), tw_(device_twiddles(g_.n)) {}
  void run(KernelContext& ctx) const override {
    const ew::LaunchConfig lc = ew::elementwise_launch(g_.batch * g_.frames * g_.bins);
    if (!lc.blocks) return;
    const double* tc = tw_.data_as<double>();
    const cudaStream_t s = stream_of(ctx);
    ew::dispatch_typeset<kSignalCudaTypes>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* w = ctx.inputs.size() > 2 && ctx.inputs[2].data ? ctx.inputs[2].as<const T>() : nullptr;
      twinfer_gpu::stft_values<<<lc.blocks, lc.threads, 0, s>>>(g_.batch, g_.frames, g_.bins, g_.len, g_.cin, g_.step,
                                                                g_.n, tc, tc + g_.n, ctx.inputs[0].as<const T>(), w,
                                                                ctx.outputs[0].as<T>());
    });
    check_launch("STFT launch");
  }
  const char* impl_name() const override { return "cuda stft (direct sums)"; }

 private:
  DType dtype_;
  StftGeometry g_;
  Tensor tw_;
};

}  // namespace

TWINFER_REGISTER_KERNEL("DFT", Backend::kCUDA, 0, signal_supports, make_kernel<CudaDft>);
TWINFER_REGISTER_KERNEL("STFT", Backend::kCUDA, 0, signal_supports, make_kernel<CudaStft>);

}  // namespace twinfer::cuda
