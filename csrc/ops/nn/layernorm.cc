// LayerNormalization (opset 17): shape rule and CPU kernel. Each row of
// prod(shape[axis:]) elements is normalised with a two-pass mean / variance
// (norm_stats.h), threaded over rows. The memory-bound loops vectorise
// fully, so a library call would only add overhead. Mean / InvStdDev are
// written in the stash_type's dtype. float16 / bfloat16 are computed in
// float, as on CUDA (backends/cuda/rows.cu): statistics and the affine map in
// float, rounded once when y is stored.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/parallel.h"
#include "core/simd_clones.h"
#include "ops/elementwise/typeset.h"
#include "ops/kernel.h"
#include "ops/nn/norm_stats.h"
#include "ops/schema.h"

namespace twinfer::nn {
namespace {

// One row: statistics in C, then (x - mean) * inv * scale (+ bias), stored
// as T.
template <typename T, typename C>
inline __attribute__((always_inline)) void normalize_row(const T* xr, int64_t D, C eps, const T* scale, const T* bias,
                                                         T* yr, C* mean_out, C* inv_out) {
  C mean, inv;
  block_stats(xr, D, eps, &mean, &inv);
  if (bias) {
#pragma omp simd
    for (int64_t i = 0; i < D; ++i)
      yr[i] = ew::store<T>((ew::load(xr[i]) - mean) * inv * ew::load(scale[i]) + ew::load(bias[i]));
  } else {
#pragma omp simd
    for (int64_t i = 0; i < D; ++i) yr[i] = ew::store<T>((ew::load(xr[i]) - mean) * inv * ew::load(scale[i]));
  }
  *mean_out = mean;
  *inv_out = inv;
}

// float32 rows multiversioned (the template builds for baseline x86-64
// only, half the vector width of AVX2).
TWINFER_SIMD_CLONES void normalize_float_row(const float* xr, int64_t D, float eps, const float* scale,
                                             const float* bias, float* yr, float* mean_out, float* inv_out) {
  normalize_row(xr, D, eps, scale, bias, yr, mean_out, inv_out);
}

DType stash_dtype(const graph::Node& n) {
  int64_t st = n.attr_int("stash_type", 1);
  DType d = dtype_from_onnx(static_cast<int32_t>(st));
  if (d != DType::kFloat32 && d != DType::kFloat64)
    throw Error(ErrorKind::kUnsupportedOp, "stash_type " + std::to_string(st) + " is not supported", n.name, n.op_type);
  return d;
}

void infer_layernorm(InferContext& c) {
  const DType dt = c.input_dtype(0);
  if (!(dtype_is_float(dt)))
    c.fail(ErrorKind::kDType, std::string("LayerNormalization needs a float input, got ") + dtype_name(dt));
  for (size_t i = 1; i < c.num_inputs(); ++i)
    if (c.has_input(i)) if (!(c.input_dtype(i) == dt))
        c.fail(ErrorKind::kDType, "LayerNormalization inputs differ in dtype");
  const DType u = stash_dtype(c.node());
  if (!c.input_has_shape(0)) {
    c.set_output_rank_unknown(0, dt);
    c.set_output_rank_unknown(1, u);
    c.set_output_rank_unknown(2, u);
    return;
  }
  const SymShape& x = c.input_shape(0);
  const int64_t rank = static_cast<int64_t>(x.size());
  if (!(rank >= 1)) c.fail(ErrorKind::kShape, "LayerNormalization input must have rank >= 1");
  const int64_t axis = normalize_axis(c, c.node().attr_int("axis", -1), rank);
  c.set_output(0, dt, x);
  SymShape stats(x.begin(), x.begin() + axis);
  stats.resize(rank, Dim(1));
  c.set_output(1, u, stats);
  c.set_output(2, u, stats);
}

TWINFER_REGISTER_SCHEMA("LayerNormalization", infer_layernorm);

class LayerNormKernel final : public Kernel {
 public:
  explicit LayerNormKernel(const KernelBuildInfo& info) {
    const graph::Node& n = info.node();
    Shape x = info.input_shape(0);
    const int64_t rank = static_cast<int64_t>(x.size());
    int64_t axis = n.attr_int("axis", -1);
    if (rank < 1 || axis < -rank || axis >= rank)
      info.fail(ErrorKind::kShape, "axis " + std::to_string(axis) + " is out of range for " + shape_str(x));
    if (axis < 0) axis += rank;
    for (int64_t i = 0; i < axis; ++i) outer_ *= x[i];
    for (int64_t i = axis; i < rank; ++i) inner_ *= x[i];
    eps_ = n.attr_float("epsilon", 1e-5f);
    stash_ = stash_dtype(n);
    has_bias_ = info.has_input(2);
    for (size_t i = 1; i <= (has_bias_ ? 2u : 1u); ++i)
      if (shape_numel(info.input_shape(i)) != inner_)
        info.fail(ErrorKind::kShape, std::string(i == 1 ? "Scale " : "B ") + shape_str(info.input_shape(i)) +
                                         " must have the normalised shape " +
                                         shape_str(Shape(x.begin() + axis, x.end())));
    has_mean_ = info.num_outputs() > 1 && info.has_output(1);
    has_inv_ = info.num_outputs() > 2 && info.has_output(2);
  }

  const char* impl_name() const override { return "cpu loop"; }

  void run(KernelContext& ctx) const override {
    ew::dispatch_typeset<ew::kFloatTypes>(ctx.inputs[0].dtype,
                                          [&](auto tag) { compute<typename decltype(tag)::type>(ctx); });
  }

 private:
  // Storage type T, computed in C (float for the 16-bit floats).
  template <typename T>
  void compute(KernelContext& ctx) const {
    using C = ew::compute_t<T>;
    const T* x = ctx.inputs[0].as<T>();
    const T* scale = ctx.inputs[1].as<T>();
    const T* bias = has_bias_ ? ctx.inputs[2].as<T>() : nullptr;
    T* y = ctx.outputs[0].as<T>();
    void* mean_out = has_mean_ ? ctx.outputs[1].data : nullptr;
    void* inv_out = has_inv_ ? ctx.outputs[2].data : nullptr;
    const int64_t D = inner_;
    const C eps = static_cast<C>(eps_);
    const bool stash64 = stash_ == DType::kFloat64;
    auto stash = [&](void* out, int64_t r, C v) {
      if (!out) return;
      if (stash64) static_cast<double*>(out)[r] = static_cast<double>(v);
      else static_cast<float*>(out)[r] = static_cast<float>(v);
    };
    const int64_t grain = std::max<int64_t>(1, 8192 / std::max<int64_t>(1, D));
    parallel_for(outer_, ctx.num_threads, grain, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        C mean, inv;
        if constexpr (std::is_same_v<T, float>)
          normalize_float_row(x + r * D, D, eps, scale, bias, y + r * D, &mean, &inv);
        else
          normalize_row(x + r * D, D, eps, scale, bias, y + r * D, &mean, &inv);
        stash(mean_out, r, mean);
        stash(inv_out, r, inv);
      }
    });
  }

  int64_t outer_ = 1, inner_ = 1;
  float eps_ = 1e-5f;
  DType stash_ = DType::kFloat32;
  bool has_bias_ = false, has_mean_ = false, has_inv_ = false;
};

bool supports(const KernelBuildInfo& info, std::string* why) {
  DType dt = info.input_dtype(0);
  if (!ew::in_typeset(ew::kFloatTypes, dt)) {
    *why = info.node().op_type + " supports float types, not " + dtype_name(dt);
    return false;
  }
  return true;
}

TWINFER_REGISTER_KERNEL("LayerNormalization", Backend::kCPU, 0, supports, make_kernel<LayerNormKernel>);

}  // namespace
}  // namespace twinfer::nn
