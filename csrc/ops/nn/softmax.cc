// Softmax / LogSoftmax: shape rule and the reference kernel (float32 /
// float64, 16-bit in float32, max-subtracted, threaded over rows). float32
// rows that are contiguous (inner == 1: attention scores, classifier heads)
// go through softmax_fast.cc's vectorised rows instead.
#include "ops/nn/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/elementwise/scalar.h"
#include "ops/schema.h"

namespace twinfer::nn {

namespace {

void infer_softmax(InferContext& c) {
  const DType dt = c.input_dtype(0);
  if (!(dtype_is_float(dt)))
    c.fail(ErrorKind::kDType, c.node().op_type + " needs a float input, got " + dtype_name(dt));
  if (c.input_has_shape(0)) {
    const int64_t rank = static_cast<int64_t>(c.input_shape(0).size());
    const int64_t axis = c.node().attr_int("axis", c.opset() >= 13 ? -1 : 1);
    if (rank > 0 || c.opset() >= 13) normalize_axis(c, axis, std::max<int64_t>(rank, 1));
  }
  infer_same_as_input0(c);
}

TWINFER_REGISTER_SCHEMA("Softmax", infer_softmax);
TWINFER_REGISTER_SCHEMA("LogSoftmax", infer_softmax);

class SoftmaxReference final : public Kernel {
 public:
  explicit SoftmaxReference(const KernelBuildInfo& info) : g_(softmax_geom(info)) {}

  void run(KernelContext& ctx) const override {
    // float16/bfloat16 compute in float32 (rounded once, on the way out).
    switch (ctx.inputs[0].dtype) {
      case DType::kFloat16: return compute<half_t, float>(ctx);
      case DType::kBFloat16: return compute<bfloat16_t, float>(ctx);
      case DType::kFloat64: return compute<double, double>(ctx);
      default: return compute<float, float>(ctx);
    }
  }

 private:
  template <typename S, typename T>
  void compute(KernelContext& ctx) const {
    const S* x = ctx.inputs[0].as<S>();
    S* y = ctx.outputs[0].as<S>();
    const int64_t L = g_.len, I = g_.inner;
    const int64_t rows = g_.outer * I;
    const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, L));
    parallel_for(rows, ctx.num_threads, grain, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t o = r / I, j = r % I;
        const S* xp = x + o * L * I + j;
        S* yp = y + o * L * I + j;
        T m = -std::numeric_limits<T>::infinity();
        for (int64_t i = 0; i < L; ++i) m = std::max(m, T(ew::load(xp[i * I])));
        T s = 0;
        for (int64_t i = 0; i < L; ++i) s += std::exp(T(ew::load(xp[i * I])) - m);
        if (g_.log) {
          const T ls = m + std::log(s);
          for (int64_t i = 0; i < L; ++i) yp[i * I] = ew::store<S>(T(ew::load(xp[i * I])) - ls);
        } else {
          const T inv = T(1) / s;
          for (int64_t i = 0; i < L; ++i) yp[i * I] = ew::store<S>(std::exp(T(ew::load(xp[i * I])) - m) * inv);
        }
      }
    });
  }

  SoftmaxGeom g_;
};

bool supports(const KernelBuildInfo& info, std::string* why) {
  DType dt = info.input_dtype(0);
  if (dt != DType::kFloat32 && dt != DType::kFloat64 && dt != DType::kFloat16 && dt != DType::kBFloat16) {
    *why = info.node().op_type + " supports float32/float64/float16/bfloat16, not " + dtype_name(dt);
    return false;
  }
  return true;
}

TWINFER_REGISTER_KERNEL("Softmax", Backend::kCPU, 0, supports, make_kernel<SoftmaxReference>);
TWINFER_REGISTER_KERNEL("LogSoftmax", Backend::kCPU, 0, supports, make_kernel<SoftmaxReference>);

}  // namespace

SoftmaxGeom softmax_geom(const KernelBuildInfo& info) {
  const graph::Node& n = info.node();
  Shape x = info.input_shape(0);
  const int64_t rank = static_cast<int64_t>(x.size());
  const bool modern = info.opset() >= 13;
  int64_t axis = n.attr_int("axis", modern ? -1 : 1);
  const int64_t r = std::max<int64_t>(rank, 1);
  if (axis < -r || axis >= r)
    info.fail(ErrorKind::kShape, "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  if (axis < 0) axis += r;
  SoftmaxGeom g;
  g.log = n.op_type == "LogSoftmax";
  if (rank == 0) return g;  // a scalar: one element
  for (int64_t i = 0; i < axis; ++i) g.outer *= x[i];
  if (modern) {
    g.len = x[axis];
    for (int64_t i = axis + 1; i < rank; ++i) g.inner *= x[i];
  } else {
    for (int64_t i = axis; i < rank; ++i) g.len *= x[i];
  }
  return g;
}

}  // namespace twinfer::nn
