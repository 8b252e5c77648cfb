// InstanceNormalization: y = scale[c] * (x - mean) / sqrt(var + eps) + B[c]
// with mean / var over each (n, c) plane. Shape rule and CPU kernel
// (two-pass statistics, vectorised, threaded over planes).
#include <algorithm>
#include <type_traits>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "core/simd_clones.h"
#include "ops/kernel.h"
#include "ops/nn/norm_stats.h"
#include "ops/schema.h"

namespace twinfer::nn {
namespace {

void infer_instancenorm(InferContext& c) {
  const DType dt = c.input_dtype(0);
  if (!(dtype_is_float(dt)))
    c.fail(ErrorKind::kDType, std::string("InstanceNormalization needs a float input, got ") + dtype_name(dt));
  for (size_t i = 1; i < 3; ++i) {
    if (!(c.has_input(i))) c.fail(ErrorKind::kModelFormat, "InstanceNormalization needs 3 inputs");
    if (!(c.input_dtype(i) == dt)) c.fail(ErrorKind::kDType, "InstanceNormalization inputs differ in dtype");
  }
  if (c.input_has_shape(0))
    if (!(c.input_shape(0).size() >= 3)) c.fail(ErrorKind::kShape, "InstanceNormalization input must have rank >= 3");
  infer_same_as_input0(c);
}

TWINFER_REGISTER_SCHEMA("InstanceNormalization", infer_instancenorm);

// One plane: statistics, then y = a x + s with a = scale / sqrt(var + eps),
// s = bias - mean a. Multiversioned for float32 (the template below builds for
// baseline x86-64 only, half the vector width of AVX2).
template <typename T>
inline __attribute__((always_inline)) void normalize_plane(const T* xp, int64_t n, T eps, T scale, T bias, T* yp) {
  T mean, inv;
  block_stats(xp, n, eps, &mean, &inv);
  const T a = inv * scale, s = bias - mean * a;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) yp[i] = a * xp[i] + s;
}

TWINFER_SIMD_CLONES void normalize_float_plane(const float* xp, int64_t n, float eps, float scale, float bias,
                                               float* yp) {
  normalize_plane(xp, n, eps, scale, bias, yp);
}

class InstanceNormKernel final : public Kernel {
 public:
  explicit InstanceNormKernel(const KernelBuildInfo& info) {
    Shape x = info.input_shape(0);
    if (x.size() < 3) info.fail(ErrorKind::kShape, "input must have rank >= 3");
    for (size_t i = 1; i < 3; ++i)
      if (info.input_shape(i) != Shape{x[1]})
        info.fail(ErrorKind::kShape, "parameter " + std::to_string(i) + " must have shape [" +
                                         std::to_string(x[1]) + "], got " + shape_str(info.input_shape(i)));
    C_ = x[1];
    planes_ = x[0] * x[1];
    for (size_t i = 2; i < x.size(); ++i) plane_ *= x[i];
    eps_ = info.node().attr_float("epsilon", 1e-5f);
  }

  const char* impl_name() const override { return "cpu loop"; }

  void run(KernelContext& ctx) const override {
    dispatch_float(ctx.inputs[0].dtype, [&](auto tag) { compute<typename decltype(tag)::type>(ctx); });
  }

 private:
  template <typename T>
  void compute(KernelContext& ctx) const {
    const T* x = ctx.inputs[0].as<T>();
    const T* scale = ctx.inputs[1].as<T>();
    const T* bias = ctx.inputs[2].as<T>();
    T* y = ctx.outputs[0].as<T>();
    const int64_t P = plane_;
    const T eps = static_cast<T>(eps_);
    const int64_t grain = std::max<int64_t>(1, 8192 / std::max<int64_t>(1, P));
    parallel_for(planes_, ctx.num_threads, grain, [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        const int64_t c = p % C_;
        if constexpr (std::is_same_v<T, float>)
          normalize_float_plane(x + p * P, P, eps, scale[c], bias[c], y + p * P);
        else
          normalize_plane(x + p * P, P, eps, scale[c], bias[c], y + p * P);
      }
    });
  }

  int64_t C_ = 0, planes_ = 0, plane_ = 1;
  float eps_ = 1e-5f;
};

bool supports(const KernelBuildInfo& info, std::string* why) {
  DType dt = info.input_dtype(0);
  if (dt != DType::kFloat32 && dt != DType::kFloat64) {
    *why = info.node().op_type + " supports float32/float64, not " + dtype_name(dt);
    return false;
  }
  return true;
}

TWINFER_REGISTER_KERNEL("InstanceNormalization", Backend::kCPU, 0, supports, make_kernel<InstanceNormKernel>);

}  // namespace
}  // namespace twinfer::nn
