// LpNormalization and Hardmax on CUDA: the input seen as [outer, len, inner]
// around the axis (Hardmax with Softmax's geometry, the 2-D coercion before
// opset 13: nn::softmax_geom), a thread per (outer, inner) lane walking its
// len values in the CPU kernel's order and type (ops/transformer/
// normalization.cc: float for float16/bfloat16), so sums and ties come out
// as on the CPU. Consecutive threads take consecutive inner positions.
// - LpNormalization: ||x||_p (p = 1: sum of |x|, p = 2: sqrt of the sum of
//   squares, the products rounded before the add as on the CPU, no FMA);
//   y = x / norm, 0 where the norm is 0.
// - Hardmax: 1 at the first maximum (the first NaN if any), 0 elsewhere.
// A lane per thread suits short axes or many lanes; a long single row runs
// on one thread (correct first).
#include <string>

#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/kernel_util.h"
#include "ops/nn/softmax.h"

namespace twinfer_gpu {

__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }

template <typename T>
__global__ void lp_norm(int64_t lanes, int64_t len, int64_t inner, int p, const T* __restrict__ x,
                        T* __restrict__ y) {
  using C = twinfer::ew::compute_t<T>;
  for (int64_t r = first_index(); r < lanes; r += grid_stride()) {
    const int64_t base = (r / inner) * len * inner + r % inner;
    C s = 0;
    for (int64_t i = 0; i < len; ++i) {
      const C v = twinfer::ew::load(x[base + i * inner]);
      s = s + (p == 1 ? twinfer::ew::m_abs(v) : mul_rn(v, v));
    }
    const C norm = p == 1 ? s : twinfer::ew::m_sqrt(s);
    for (int64_t i = 0; i < len; ++i)
      y[base + i * inner] =
          twinfer::ew::store<T>(norm == C(0) ? C(0) : C(twinfer::ew::load(x[base + i * inner])) / norm);
  }
}

template <typename T>
__global__ void hardmax(int64_t lanes, int64_t len, int64_t inner, const T* __restrict__ x, T* __restrict__ y) {
  using C = twinfer::ew::compute_t<T>;
  for (int64_t r = first_index(); r < lanes; r += grid_stride()) {
    const int64_t base = (r / inner) * len * inner + r % inner;
    int64_t best = 0;
    C m = twinfer::ew::load(x[base]);
    for (int64_t i = 1; i < len; ++i) {
      const C v = twinfer::ew::load(x[base + i * inner]);
      if (v > m || (v != v && m == m)) {
        m = v;
        best = i;
      }
    }
    for (int64_t i = 0; i < len; ++i) y[base + i * inner] = twinfer::ew::store<T>(C(i == best ? 1 : 0));
  }
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {
namespace {

bool float_supports(const KernelBuildInfo& info, std::string* why) {
  return ew::check_input_dtype(info, 0, ew::kFloatTypes, why);
}

bool lpnorm_supports(const KernelBuildInfo& info, std::string* why) {
  if (!float_supports(info, why)) return false;
  const int64_t p = info.node().attr_int("p", 2);
  if (p != 1 && p != 2) {
    if (why) *why = "LpNormalization p must be 1 or 2";
    return false;
  }
  return true;
}

class CudaLpNorm final : public Kernel {
 public:
  explicit CudaLpNorm(const KernelBuildInfo& info)
      : dtype_(info.input_dtype(0)), p_(static_cast<int>(info.node().attr_int("p", 2))) {
    const Shape x = info.input_shape(0);
    const int64_t rank = static_cast<int64_t>(x.size());
    int64_t axis = info.node().attr_int("axis", -1);
    if (rank < 1 || axis < -rank || axis >= rank)
      info.fail(ErrorKind::kShape, "axis " + std::to_string(axis) + " is out of range for " + shape_str(x));
    if (axis < 0) axis += rank;
    int64_t outer = 1;
    for (int64_t i = 0; i < axis; ++i) outer *= x[i];
    len_ = x[axis];
    for (int64_t i = axis + 1; i < rank; ++i) inner_ *= x[i];
    lanes_ = outer * inner_;
  }
  void run(KernelContext& ctx) const override {
    const ew::LaunchConfig lc = ew::elementwise_launch(lanes_);
    if (!lc.blocks || len_ == 0) return;
    const cudaStream_t s = stream_of(ctx);
    ew::dispatch_typeset<ew::kFloatTypes>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      twinfer_gpu::lp_norm<<<lc.blocks, lc.threads, 0, s>>>(lanes_, len_, inner_, p_, ctx.inputs[0].as<const T>(),
                                                            ctx.outputs[0].as<T>());
    });
    check_launch("LpNormalization launch");
  }
  const char* impl_name() const override { return "cuda lane (a thread per lane)"; }

 private:
  DType dtype_;
  int p_;
  int64_t len_ = 0, inner_ = 1, lanes_ = 0;
};

class CudaHardmax final : public Kernel {
 public:
  explicit CudaHardmax(const KernelBuildInfo& info) : dtype_(info.input_dtype(0)), g_(nn::softmax_geom(info)) {}
  void run(KernelContext& ctx) const override {
    const int64_t lanes = g_.outer * g_.inner;
    const ew::LaunchConfig lc = ew::elementwise_launch(lanes);
    if (!lc.blocks || g_.len == 0) return;
    const cudaStream_t s = stream_of(ctx);
    ew::dispatch_typeset<ew::kFloatTypes>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      twinfer_gpu::hardmax<<<lc.blocks, lc.threads, 0, s>>>(lanes, g_.len, g_.inner, ctx.inputs[0].as<const T>(),
                                                            ctx.outputs[0].as<T>());
    });
    check_launch("Hardmax launch");
  }
  const char* impl_name() const override { return "cuda lane (a thread per lane)"; }

 private:
  DType dtype_;
  nn::SoftmaxGeom g_;
};

}  // namespace

TWINFER_REGISTER_KERNEL("LpNormalization", Backend::kCUDA, 0, lpnorm_supports, make_kernel<CudaLpNorm>);
TWINFER_REGISTER_KERNEL("Hardmax", Backend::kCUDA, 0, float_supports, make_kernel<CudaHardmax>);

}  // namespace twinfer::cuda
