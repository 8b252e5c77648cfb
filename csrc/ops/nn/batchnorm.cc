// BatchNormalization, inference mode: y = scale * (x - mean) / sqrt(var + eps) + B
// per channel (dim 1). A memory-bound affine map per (n, c) plane: a plain
// vectorisable loop over threads is as fast as a library call and needs no
// layout change, so there is no oneDNN variant. Training mode (running
// statistics outputs) is not supported.
#include <cmath>
#include <type_traits>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "core/simd_clones.h"
#include "ops/kernel.h"
#include "ops/schema.h"

namespace twinfer::nn {
namespace {

void check_attrs(const graph::Node& n, bool has_extra_outputs) {
  if (n.attr_int("training_mode", 0) != 0)
    throw Error(ErrorKind::kUnsupportedOp, "training_mode=1 is not supported (inference only)", n.name, n.op_type);
  if (n.attr_int("spatial", 1) != 1)
    throw Error(ErrorKind::kUnsupportedOp, "spatial=0 is not supported", n.name, n.op_type);
  if (has_extra_outputs)
    throw Error(ErrorKind::kUnsupportedOp,
                "the running mean/var outputs exist only in training mode, which is not supported", n.name,
                n.op_type);
}

void infer_batchnorm(InferContext& c) {
  bool extra = false;
  for (size_t i = 1; i < c.num_outputs(); ++i) extra = extra || c.has_output(i);
  check_attrs(c.node(), extra);
  const DType dt = c.input_dtype(0);
  if (!(dtype_is_float(dt)))
    c.fail(ErrorKind::kDType, std::string("BatchNormalization needs a float input, got ") + dtype_name(dt));
  for (size_t i = 1; i < 5; ++i) {
    if (!(c.has_input(i))) c.fail(ErrorKind::kModelFormat, "BatchNormalization needs 5 inputs");
    if (!(c.input_dtype(i) == dt)) c.fail(ErrorKind::kDType, "BatchNormalization inputs differ in dtype");
  }
  if (c.input_has_shape(0)) {
    const SymShape& x = c.input_shape(0);
    if (!(x.size() >= 2)) c.fail(ErrorKind::kShape, "BatchNormalization input must have rank >= 2");
    for (size_t i = 1; i < 5; ++i) {
      if (!c.input_has_shape(i)) continue;
      const SymShape& p = c.input_shape(i);
      if (!(p.size() == 1 && (!p[0].known() || !x[1].known() || p[0].value == x[1].value)))
        c.fail(ErrorKind::kShape,
               "parameter " + std::to_string(i) + " must have shape [C] = [" + x[1].str() + "], got " +
                   sym_shape_str(p));
    }
  }
  infer_same_as_input0(c);
}

TWINFER_REGISTER_SCHEMA("BatchNormalization", infer_batchnorm);

// y = a x + s over one plane, float32, multiversioned: the baseline build's
// four lanes made BatchNormalization [8, 64, 56, 56] 1.4x onnxruntime.
TWINFER_SIMD_CLONES void affine_plane(const float* __restrict x, float* __restrict y, int64_t n, float a, float s) {
  for (int64_t i = 0; i < n; ++i) y[i] = a * x[i] + s;
}

class BatchNormKernel final : public Kernel {
 public:
  explicit BatchNormKernel(const KernelBuildInfo& info) {
    const graph::Node& n = info.node();
    bool extra = false;
    for (size_t i = 1; i < info.num_outputs(); ++i) extra = extra || info.has_output(i);
    check_attrs(n, extra);
    eps_ = n.attr_float("epsilon", 1e-5f);
    Shape x = info.input_shape(0);
    if (x.size() < 2) info.fail(ErrorKind::kShape, "input must have rank >= 2");
    for (size_t i = 1; i < 5; ++i)
      if (info.input_shape(i) != Shape{x[1]})
        info.fail(ErrorKind::kShape, "parameter " + std::to_string(i) + " must have shape [" +
                                         std::to_string(x[1]) + "], got " + shape_str(info.input_shape(i)));
    C_ = x[1];
    planes_ = x[0] * C_;
    plane_ = 1;
    for (size_t i = 2; i < x.size(); ++i) plane_ *= x[i];
  }

  const char* impl_name() const override { return "cpu loop"; }

  void run(KernelContext& ctx) const override {
    dispatch_float(ctx.inputs[0].dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      compute<T>(ctx);
    });
  }

 private:
  template <typename T>
  void compute(KernelContext& ctx) const {
    const T* x = ctx.inputs[0].as<T>();
    const T* scale = ctx.inputs[1].as<T>();
    const T* bias = ctx.inputs[2].as<T>();
    const T* mean = ctx.inputs[3].as<T>();
    const T* var = ctx.inputs[4].as<T>();
    T* y = ctx.outputs[0].as<T>();
    const int64_t plane = plane_, C = C_;
    const T eps = static_cast<T>(eps_);
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, plane));
    parallel_for(planes_, ctx.num_threads, grain, [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        const int64_t c = p % C;
        const T a = scale[c] / std::sqrt(var[c] + eps);
        const T s = bias[c] - mean[c] * a;
        const T* xp = x + p * plane;
        T* yp = y + p * plane;
        if constexpr (std::is_same_v<T, float>) {
          affine_plane(xp, yp, plane, a, s);
        } else {
#pragma omp simd
          for (int64_t i = 0; i < plane; ++i) yp[i] = a * xp[i] + s;
        }
      }
    });
  }

  float eps_ = 1e-5f;
  int64_t C_ = 0, planes_ = 0, plane_ = 1;
};

bool supports(const KernelBuildInfo& info, std::string* why) {
  DType dt = info.input_dtype(0);
  if (dt != DType::kFloat32 && dt != DType::kFloat64) {
    *why = std::string("BatchNormalization supports float32/float64, not ") + dtype_name(dt);
    return false;
  }
  return true;
}

TWINFER_REGISTER_KERNEL("BatchNormalization", Backend::kCPU, 0, supports, make_kernel<BatchNormKernel>);

}  // namespace
}  // namespace twinfer::nn
