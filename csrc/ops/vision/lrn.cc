// LRN (local response normalisation across channels, AlexNet / ZFNet /
// GoogLeNet) and GroupNormalization: shape rules and CPU kernels, float32 /
// float64, threaded over (n, c) planes / (n, group) blocks.
//
// LRN: y = x / (bias + alpha / size * sum of x^2 over the channels
// [c - floor((size-1)/2), c + ceil((size-1)/2)])^beta.
// GroupNormalization: mean / variance over each group of C/G channels and
// the spatial dims; scale and bias are per channel (opset 21) or, in opset
// 18, per group (the kernel accepts either length in either opset).
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/kernel.h"
#include "ops/nn/norm_stats.h"
#include "ops/schema.h"
#include "ops/vision/lrn.h"

namespace twinfer::vision {
namespace {

bool float_supports(const KernelBuildInfo& info, std::string* why) {
  const DType dt = info.input_dtype(0);
  if (dt != DType::kFloat32 && dt != DType::kFloat64) {
    *why = info.node().op_type + " supports float32/float64, not " + dtype_name(dt);
    return false;
  }
  return true;
}

// ---- LRN -------------------------------------------------------------------------

void lrn_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  if (!(dtype_is_float(dt))) c.fail(ErrorKind::kDType, std::string("LRN needs a float input, got ") + dtype_name(dt));
  if (!(c.node().has_attr("size") && c.node().attr_int("size", 0) > 0))
    c.fail(ErrorKind::kModelFormat, "LRN needs a positive 'size'");
  if (c.input_has_shape(0))
    if (!(c.input_shape(0).size() >= 3)) c.fail(ErrorKind::kShape, "LRN input must have rank >= 3");
  infer_same_as_input0(c);
}

class LrnKernel final : public Kernel {
 public:
  explicit LrnKernel(const KernelBuildInfo& info) : p_(lrn_params(info)) {}

  const char* impl_name() const override { return "cpu loop"; }

  void run(KernelContext& ctx) const override {
    dispatch_float(ctx.inputs[0].dtype, [&](auto tag) { compute<typename decltype(tag)::type>(ctx); });
  }

 private:
  template <typename T>
  void compute(KernelContext& ctx) const {
    const T* x = ctx.inputs[0].as<T>();
    T* y = ctx.outputs[0].as<T>();
    const int64_t P = p_.P, C = p_.C;
    const int64_t lo = (p_.size - 1) / 2, hi = p_.size - 1 - lo;
    const T a = static_cast<T>(p_.alpha) / static_cast<T>(p_.size), k = static_cast<T>(p_.bias), b = static_cast<T>(p_.beta);
    const bool b075 = p_.beta == 0.75f;
    const int64_t grain = std::max<int64_t>(1, 8192 / std::max<int64_t>(1, P * p_.size));
    parallel_for(p_.N * C, ctx.num_threads, grain, [&](int64_t pb, int64_t pe) {
      std::vector<T> acc(static_cast<size_t>(P));
      for (int64_t p = pb; p < pe; ++p) {
        const int64_t n = p / C, c = p - n * C;
        std::fill(acc.begin(), acc.end(), T(0));
        T* s = acc.data();
        for (int64_t j = std::max<int64_t>(0, c - lo); j <= std::min<int64_t>(C - 1, c + hi); ++j) {
          const T* xj = x + (n * C + j) * P;
#pragma omp simd
          for (int64_t i = 0; i < P; ++i) s[i] += xj[i] * xj[i];
        }
        const T* xp = x + p * P;
        T* yp = y + p * P;
        if (b075) {
#pragma omp simd
          for (int64_t i = 0; i < P; ++i) {
            const T t = k + a * s[i];
            const T r = std::sqrt(t);
            yp[i] = xp[i] / (r * std::sqrt(r));
          }
        } else {
          for (int64_t i = 0; i < P; ++i) yp[i] = xp[i] * std::pow(k + a * s[i], -b);
        }
      }
    });
  }

  LrnParams p_;
};

// ---- GroupNormalization ----------------------------------------------------------

void group_norm_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  if (!(dtype_is_float(dt)))
    c.fail(ErrorKind::kDType, std::string("GroupNormalization needs a float input, got ") + dtype_name(dt));
  if (!(c.has_input(1) && c.has_input(2))) c.fail(ErrorKind::kModelFormat, "GroupNormalization needs 3 inputs");
  const int64_t g = c.node().attr_int("num_groups", 0);
  if (!(g > 0)) c.fail(ErrorKind::kModelFormat, "GroupNormalization needs a positive 'num_groups'");
  if (c.input_has_shape(0)) {
    const SymShape& x = c.input_shape(0);
    if (!(x.size() >= 2)) c.fail(ErrorKind::kShape, "GroupNormalization input must have rank >= 2");
    if (x[1].known())
      if (!(x[1].value % g == 0))
        c.fail(ErrorKind::kShape,
               std::to_string(x[1].value) + " channels do not split into " + std::to_string(g) + " groups");
  }
  infer_same_as_input0(c);
}

class GroupNormKernel final : public Kernel {
 public:
  explicit GroupNormKernel(const KernelBuildInfo& info) {
    const Shape x = info.input_shape(0);
    if (x.size() < 2) info.fail(ErrorKind::kShape, "input must have rank >= 2");
    G_ = info.node().attr_int("num_groups", 0);
    N_ = x[0];
    C_ = x[1];
    if (G_ <= 0 || C_ % G_ != 0)
      info.fail(ErrorKind::kShape, std::to_string(C_) + " channels do not split into " + std::to_string(G_) + " groups");
    for (size_t i = 2; i < x.size(); ++i) P_ *= x[i];
    for (size_t i = 1; i < 3; ++i) {
      const Shape s = info.input_shape(i);
      if (s.size() != 1 || (s[0] != C_ && s[0] != G_))
        info.fail(ErrorKind::kShape, std::string(i == 1 ? "scale" : "bias") + " must have shape [" +
                                         std::to_string(C_) + "] (or [" + std::to_string(G_) + "] per group), got " +
                                         shape_str(s));
      per_group_[i - 1] = s[0] != C_;
    }
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
    const int64_t cg = C_ / G_, P = P_, block = cg * P;
    const T eps = static_cast<T>(eps_);
    const int64_t grain = std::max<int64_t>(1, 8192 / std::max<int64_t>(1, block));
    parallel_for(N_ * G_, ctx.num_threads, grain, [&](int64_t b, int64_t e) {
      for (int64_t q = b; q < e; ++q) {
        const int64_t g = q % G_;
        const T* xp = x + q * block;
        T* yp = y + q * block;
        T mean, inv;
        nn::block_stats(xp, block, eps, &mean, &inv);
        for (int64_t j = 0; j < cg; ++j) {
          const int64_t c = g * cg + j;
          const T sc = per_group_[0] ? scale[g] : scale[c];
          const T bi = per_group_[1] ? bias[g] : bias[c];
          const T a = inv * sc, s = bi - mean * a;
          const T* xr = xp + j * P;
          T* yr = yp + j * P;
#pragma omp simd
          for (int64_t i = 0; i < P; ++i) yr[i] = a * xr[i] + s;
        }
      }
    });
  }

  int64_t G_ = 1, N_ = 0, C_ = 0, P_ = 1;
  bool per_group_[2] = {false, false};
  float eps_ = 1e-5f;
};

}  // namespace

TWINFER_REGISTER_SCHEMA("LRN", lrn_infer);
TWINFER_REGISTER_KERNEL("LRN", Backend::kCPU, 0, float_supports, make_kernel<LrnKernel>);
TWINFER_REGISTER_SCHEMA("GroupNormalization", group_norm_infer);
TWINFER_REGISTER_KERNEL("GroupNormalization", Backend::kCPU, 0, float_supports, make_kernel<GroupNormKernel>);

}  // namespace twinfer::vision
