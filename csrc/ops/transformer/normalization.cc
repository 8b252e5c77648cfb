// Normalisations and Hardmax, each a shape rule plus a threaded CPU loop over
// every float type (16-bit ones computed in float):
//
//   RMSNormalization (23)   y = x / sqrt(mean(x^2 over axes [axis, rank)) + eps) * scale
//   LpNormalization (1, 22) y = x / ||x||_p along one axis (p in {1, 2}); 0 where the norm is 0
//   MeanVarianceNormalization (9, 13)
//                           y = (x - mean) / (sqrt(var) + 1e-9), statistics over `axes`
//   Hardmax (1, 11, 13)     1 at the first maximum along the axis, 0 elsewhere
//                           (the axis semantics of Softmax: 2-D coercion before 13)
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/float_lanes.h"
#include "core/parallel.h"
#include "core/simd_clones.h"
#include "ops/nn/softmax.h"
#include "ops/reduce/reduce_f32.h"
#include "ops/transformer/tx_common.h"

namespace twinfer::tx {
namespace {

// ---- RMSNormalization ---------------------------------------------------------

void infer_rmsnorm(InferContext& c) {
  const DType dt = c.input_dtype(0);
  if (!(ew::in_typeset(ew::kFloatTypes, dt)))
    c.fail(ErrorKind::kDType, std::string("RMSNormalization needs a float input, got ") + dtype_name(dt));
  if (!(c.num_inputs() == 2 && c.has_input(1))) c.fail(ErrorKind::kModelFormat, "RMSNormalization takes X and scale");
  const DType st = c.input_dtype(1);
  if (!(ew::in_typeset(ew::kFloatTypes, st)))
    c.fail(ErrorKind::kDType, std::string("RMSNormalization scale must be float, got ") + dtype_name(st));
  const int64_t stash = c.node().attr_int("stash_type", 1);
  if (!(stash == 1 || stash == 11))
    c.fail(ErrorKind::kUnsupportedOp, "stash_type " + std::to_string(stash) + " is not supported (float or double)");
  if (!c.input_has_shape(0)) {
    c.set_output_rank_unknown(0, st);
    return;
  }
  const SymShape& x = c.input_shape(0);
  const int64_t rank = static_cast<int64_t>(x.size());
  if (!(rank >= 1)) c.fail(ErrorKind::kShape, "RMSNormalization input must have rank >= 1");
  normalize_axis(c, c.node().attr_int("axis", -1), rank);  // refuses an axis out of range
  if (c.input_has_shape(1)) {
    // Broadcast to the normalised shape, or to X's whole shape (torch's
    // exporter writes RMSNorm without a weight as a scale of ones shaped like X).
    const SymShape& s = c.input_shape(1);
    if (!(static_cast<int64_t>(s.size()) <= rank))
      c.fail(ErrorKind::kShape, "scale " + sym_shape_str(s) + " has more dims than X " + sym_shape_str(x));
    for (size_t i = 0; i < s.size(); ++i) {
      const Dim& xd = x[rank - s.size() + i];
      if (!(!s[i].known() || s[i].value == 1 || dims_compatible(s[i], xd)))
        c.fail(ErrorKind::kShape,
               "scale " + sym_shape_str(s) + " does not broadcast to the normalised shape of " + sym_shape_str(x));
    }
  }
  c.set_output(0, st, x);
}

TWINFER_REGISTER_SCHEMA("RMSNormalization", infer_rmsnorm);

// Index of each normalised element into a scale broadcast onto `inner` (empty: scale is dense).
std::vector<int64_t> broadcast_index(const KernelBuildInfo& info, const Shape& norm, const Shape& s) {
  if (shape_numel(s) == shape_numel(norm) && s.size() <= norm.size()) {
    bool same = true;
    for (size_t i = 0; i < s.size(); ++i) same &= s[s.size() - 1 - i] == norm[norm.size() - 1 - i];
    if (same) return {};
  }
  if (s.size() > norm.size())
    info.fail(ErrorKind::kShape, "scale " + shape_str(s) + " has more dims than the normalised shape " +
                                     shape_str(norm));
  Shape sp(norm.size() - s.size(), 1);
  sp.insert(sp.end(), s.begin(), s.end());
  Shape st(sp.size(), 0);
  int64_t stride = 1;
  for (size_t d = sp.size(); d-- > 0;) {
    if (sp[d] != 1 && sp[d] != norm[d])
      info.fail(ErrorKind::kShape, "scale " + shape_str(s) + " does not broadcast to " + shape_str(norm));
    st[d] = sp[d] == 1 ? 0 : stride;
    stride *= sp[d];
  }
  const int64_t n = shape_numel(norm);
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, off = 0;
    for (size_t d = norm.size(); d-- > 0;) {
      off += (rem % norm[d]) * st[d];
      rem /= norm[d];
    }
    idx[i] = off;
  }
  return idx;
}

// A float32 row with a dense scale: the sum of squares in eight lanes
// (core/float_lanes.h; a float reduction stays scalar otherwise), multiversioned.

TWINFER_SIMD_CLONES void rms_float_row(const float* xr, int64_t D, float eps, const float* sr, float* yr) {
  Lanes8 acc = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= D; i += 8) {
    const Lanes8 v = load8(xr + i);
    acc += v * v;
  }
  float q = 0.f;
  for (; i < D; ++i) q += xr[i] * xr[i];
  for (int k = 0; k < 8; ++k) q += acc[k];
  const float inv = 1.f / std::sqrt(q / static_cast<float>(D) + eps);
  for (i = 0; i < D; ++i) yr[i] = (xr[i] * inv) * sr[i];
}

class RMSNormKernel final : public Kernel {
 public:
  explicit RMSNormKernel(const KernelBuildInfo& info) {
    const graph::Node& n = info.node();
    Shape x = info.input_shape(0);
    const int64_t rank = static_cast<int64_t>(x.size());
    int64_t axis = n.attr_int("axis", -1);
    if (rank < 1 || axis < -rank || axis >= rank)
      info.fail(ErrorKind::kShape, "axis " + std::to_string(axis) + " is out of range for " + shape_str(x));
    if (axis < 0) axis += rank;
    for (int64_t i = 0; i < axis; ++i) outer_ *= x[i];
    for (int64_t i = axis; i < rank; ++i) inner_ *= x[i];
    Shape s = info.input_shape(1);
    if (static_cast<int64_t>(s.size()) > rank - axis) {
      // A scale with dims of its own over X's leading (outer) axes: an offset
      // per row, and the inner part as for a plain scale.
      if (static_cast<int64_t>(s.size()) > rank)
        info.fail(ErrorKind::kShape, "scale " + shape_str(s) + " has more dims than X " + shape_str(x));
      s.insert(s.begin(), rank - static_cast<int64_t>(s.size()), 1);
      std::vector<int64_t> stride(static_cast<size_t>(rank), 0);
      int64_t step = 1;
      for (int64_t d = rank; d-- > 0;) {
        if (s[d] != 1 && s[d] != x[d])
          info.fail(ErrorKind::kShape, "scale " + shape_str(s) + " does not broadcast to X " + shape_str(x));
        stride[d] = s[d] == 1 ? 0 : step;
        step *= s[d];
      }
      bool any_outer = false;
      for (int64_t d = 0; d < axis; ++d) any_outer |= stride[d] != 0;
      if (any_outer) {
        oidx_.resize(static_cast<size_t>(outer_));
        for (int64_t r = 0; r < outer_; ++r) {
          int64_t rem = r, off = 0;
          for (int64_t d = axis; d-- > 0;) {
            off += (rem % x[d]) * stride[d];
            rem /= x[d];
          }
          oidx_[r] = off;
        }
      }
      s.erase(s.begin(), s.begin() + axis);  // the inner part, as broadcast_index takes it
    }
    sidx_ = broadcast_index(info, Shape(x.begin() + axis, x.end()), s);
    eps_ = n.attr_float("epsilon", 1e-5f);
    vectorised_ = sidx_.empty() && info.input_dtype(0) == DType::kFloat32 && info.input_dtype(1) == DType::kFloat32;
  }
  const char* impl_name() const override { return vectorised_ ? "vectorised float32 rows" : "cpu loop"; }

  void run(KernelContext& ctx) const override {
    dispatch_any_float(ctx.inputs[0].dtype, [&](auto tx) {
      using T = typename decltype(tx)::type;
      dispatch_any_float(ctx.inputs[1].dtype, [&](auto ts) {
        using S = typename decltype(ts)::type;
        compute<T, S>(ctx);
      });
    });
  }

 private:
  template <typename T, typename S>
  void compute(KernelContext& ctx) const {
    // Statistics in double for float64 inputs, else float (stash_type 1).
    using C = std::conditional_t<std::is_same<T, double>::value || std::is_same<S, double>::value, double, float>;
    const T* x = ctx.inputs[0].as<T>();
    const S* scale = ctx.inputs[1].as<S>();
    S* y = ctx.outputs[0].as<S>();
    const int64_t D = inner_;
    const int64_t* si = sidx_.empty() ? nullptr : sidx_.data();
    const int64_t* oi = oidx_.empty() ? nullptr : oidx_.data();
    const C eps = static_cast<C>(eps_);
    const int64_t grain = std::max<int64_t>(1, 8192 / std::max<int64_t>(1, D));
    parallel_for(outer_, ctx.num_threads, grain, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const T* xr = x + r * D;
        S* yr = y + r * D;
        const S* sr = scale + (oi ? oi[r] : 0);
        if constexpr (std::is_same_v<T, float> && std::is_same_v<S, float>) {
          if (!si) {
            rms_float_row(xr, D, eps, sr, yr);
            continue;
          }
        }
        C q = 0;
        for (int64_t i = 0; i < D; ++i) {
          const C v = static_cast<C>(load(xr[i]));
          q += v * v;
        }
        const C inv = C(1) / std::sqrt(q / static_cast<C>(D) + eps);
        for (int64_t i = 0; i < D; ++i) {
          // Normalised value rounded to X's type, then scaled (the function body's order).
          const C nv = static_cast<C>(load(store<T>(static_cast<C>(load(xr[i])) * inv)));
          yr[i] = store<S>(nv * static_cast<C>(load(sr[si ? si[i] : i])));
        }
      }
    });
  }

  int64_t outer_ = 1, inner_ = 1;
  std::vector<int64_t> sidx_;  // scale offset per normalised element (empty: dense)
  std::vector<int64_t> oidx_;  // scale offset per row, for a scale with dims over X's outer axes (empty: none)
  float eps_ = 1e-5f;
  bool vectorised_ = false;  // float32 X and scale, the scale dense over the row: rms_float_row
};

bool rms_supports(const KernelBuildInfo& info, std::string* why) {
  for (size_t i = 0; i < 2; ++i)
    if (!ew::in_typeset(ew::kFloatTypes, info.input_dtype(i))) {
      *why = std::string("RMSNormalization supports float types, not ") + dtype_name(info.input_dtype(i));
      return false;
    }
  return true;
}

TWINFER_REGISTER_KERNEL("RMSNormalization", Backend::kCPU, 0, rms_supports, make_kernel<RMSNormKernel>);

// ---- LpNormalization ---------------------------------------------------------

void infer_float_same(InferContext& c) {
  const DType dt = c.input_dtype(0);
  if (!(ew::in_typeset(ew::kFloatTypes, dt)))
    c.fail(ErrorKind::kDType, c.node().op_type + " needs a float input, got " + dtype_name(dt));
  infer_same_as_input0(c);
}

void infer_lpnorm(InferContext& c) {
  const int64_t p = c.node().attr_int("p", 2);
  if (!(p == 1 || p == 2))
    c.fail(ErrorKind::kModelFormat, "LpNormalization p must be 1 or 2, got " + std::to_string(p));
  if (c.input_has_shape(0)) {
    const int64_t rank = static_cast<int64_t>(c.input_shape(0).size());
    if (!(rank >= 1)) c.fail(ErrorKind::kShape, "LpNormalization input must have rank >= 1");
    normalize_axis(c, c.node().attr_int("axis", -1), rank);
  }
  infer_float_same(c);
}

TWINFER_REGISTER_SCHEMA("LpNormalization", infer_lpnorm);

// [outer, len, inner] view of a tensor around one axis.
struct AxisGeom {
  int64_t outer = 1, len = 1, inner = 1;
};

AxisGeom axis_geom(const KernelBuildInfo& info, int64_t axis) {
  Shape x = info.input_shape(0);
  const int64_t rank = static_cast<int64_t>(x.size());
  if (rank < 1 || axis < -rank || axis >= rank)
    info.fail(ErrorKind::kShape, "axis " + std::to_string(axis) + " is out of range for " + shape_str(x));
  if (axis < 0) axis += rank;
  AxisGeom g;
  for (int64_t i = 0; i < axis; ++i) g.outer *= x[i];
  g.len = x[axis];
  for (int64_t i = axis + 1; i < rank; ++i) g.inner *= x[i];
  return g;
}

class LpNormKernel final : public Kernel {
 public:
  explicit LpNormKernel(const KernelBuildInfo& info)
      : g_(axis_geom(info, info.node().attr_int("axis", -1))), p_(info.node().attr_int("p", 2)) {
    if (p_ != 1 && p_ != 2) info.fail(ErrorKind::kModelFormat, "p must be 1 or 2");
  }
  const char* impl_name() const override { return "cpu loop"; }

  void run(KernelContext& ctx) const override {
    dispatch_any_float(ctx.inputs[0].dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = compute_t<T>;
      const T* x = ctx.inputs[0].as<T>();
      T* y = ctx.outputs[0].as<T>();
      const int64_t L = g_.len, I = g_.inner;
      parallel_for(g_.outer * I, ctx.num_threads, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, L)),
                   [&](int64_t lo, int64_t hi) {
                          for (int64_t r = lo; r < hi; ++r) {
                            const int64_t base = (r / I) * L * I + r % I;
                            C s = 0;
                            for (int64_t i = 0; i < L; ++i) {
                              const C v = load(x[base + i * I]);
                              s += p_ == 1 ? std::abs(v) : v * v;
                            }
                            const C norm = p_ == 1 ? s : std::sqrt(s);
                            for (int64_t i = 0; i < L; ++i)
                              y[base + i * I] = store<T>(norm == C(0) ? C(0) : C(load(x[base + i * I])) / norm);
                          }
                        });
    });
  }

 private:
  AxisGeom g_;
  int64_t p_;
};

bool float_supports(const KernelBuildInfo& info, std::string* why) { return float_inputs(info, {}, why); }

TWINFER_REGISTER_KERNEL("LpNormalization", Backend::kCPU, 0, float_supports, make_kernel<LpNormKernel>);

// ---- MeanVarianceNormalization -------------------------------------------------

std::vector<int64_t> mvn_axes(const graph::Node& n) { return n.attr_ints("axes", {0, 2, 3}); }

void infer_mvn(InferContext& c) {
  if (c.input_has_shape(0)) {
    const int64_t rank = static_cast<int64_t>(c.input_shape(0).size());
    std::vector<bool> seen(rank, false);
    for (int64_t a : mvn_axes(c.node())) {
      const int64_t ax = normalize_axis(c, a, rank);
      if (!(!seen[ax]))
        c.fail(ErrorKind::kModelFormat, "MeanVarianceNormalization axis " + std::to_string(a) + " repeats");
      seen[ax] = true;
    }
  }
  infer_float_same(c);
}

TWINFER_REGISTER_SCHEMA("MeanVarianceNormalization", infer_mvn);

// MVN's float32 rows, multiversioned (a double sum in one chain ran at an
// add's latency per element: 1.17x onnxruntime's time on [8, 64, 56, 56],
// on one thread whatever the thread count). The sum of (x - m)^2 over a row
// in eight double lanes, as reduce::sum_float_row sums x.
TWINFER_SIMD_CLONES double mvn_squared_deviations_row(const float* x, int64_t n, double m) {
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) {
      const double d = static_cast<double>(x[i + k]) - m;
      lane[k] += d * d;
    }
  for (; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - m;
    lane[0] += d * d;
  }
  double a = lane[0];
  for (int k = 1; k < 8; ++k) a += lane[k];
  return a;
}

// y = (x - m) * v in double, rounded once to float.
TWINFER_SIMD_CLONES void mvn_normalize_row(const float* x, float* y, int64_t n, double m, double v) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>((static_cast<double>(x[i]) - m) * v);
}

// x as [rows, run]: run is the product of the trailing reduced dims (1 when
// the last dim is kept), so each row belongs to one group (the flat index
// over the kept dims), listed once per plan by an odometer over the row's
// dims. Sums in double over each run, then y a run at a time.
class MVNKernel final : public Kernel {
 public:
  explicit MVNKernel(const KernelBuildInfo& info) {
    Shape x = info.input_shape(0);
    const int64_t rank = static_cast<int64_t>(x.size());
    std::vector<bool> red(rank, false);
    for (int64_t a : mvn_axes(info.node())) {
      if (a < -rank || a >= rank)
        info.fail(ErrorKind::kShape, "axis " + std::to_string(a) + " is out of range for " + shape_str(x));
      red[a < 0 ? a + rank : a] = true;
    }
    Shape kept_stride(rank, 0);
    int64_t s = 1;
    for (int64_t d = rank; d-- > 0;) {
      if (red[d]) {
        count_ *= x[d];
      } else {
        kept_stride[d] = s;
        s *= x[d];
      }
    }
    groups_ = s;
    int64_t lead = rank;  // the dims before the run
    while (lead > 0 && red[lead - 1]) run_ *= x[--lead];
    if (shape_numel(x) == 0) return;
    const int64_t rows = shape_numel(x) / run_;
    row_group_.resize(static_cast<size_t>(rows));
    std::vector<int64_t> digit(static_cast<size_t>(lead), 0);
    int64_t g = 0;
    for (int64_t r = 0; r < rows; ++r) {
      row_group_[r] = g;
      for (int64_t d = lead; d-- > 0;) {  // count up; g follows the kept digits
        g += kept_stride[d];
        if (++digit[d] < x[d]) break;
        g -= kept_stride[d] * x[d];
        digit[d] = 0;
      }
    }
  }
  const char* impl_name() const override { return "cpu rows"; }

  void run(KernelContext& ctx) const override {
    dispatch_any_float(ctx.inputs[0].dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = std::conditional_t<std::is_same<T, double>::value, double, float>;
      const T* x = ctx.inputs[0].as<T>();
      T* y = ctx.outputs[0].as<T>();
      const int64_t rows = static_cast<int64_t>(row_group_.size()), run = run_;
      if (rows == 0) return;
      std::vector<double> mean(groups_, 0.0), inv(groups_, 0.0), part(static_cast<size_t>(rows));
      const int64_t grain = std::max<int64_t>(1, 16384 / run);
      // Each row's partial sum on the run's threads, then added into its
      // group in row order: the same result for any thread count.
      auto per_row = [&](auto&& row_sum, std::vector<double>& into) {
        parallel_for(rows, ctx.num_threads, grain, [&](int64_t b, int64_t e) {
          for (int64_t r = b; r < e; ++r) part[r] = row_sum(x + r * run, r);
        });
        for (int64_t r = 0; r < rows; ++r) into[row_group_[r]] += part[r];
      };
      per_row(
          [&](const T* xr, int64_t) {
            if constexpr (std::is_same<T, float>::value) return reduce::sum_float_row(xr, run);
            double sum = 0;
            for (int64_t i = 0; i < run; ++i) sum += static_cast<double>(load(xr[i]));
            return sum;
          },
          mean);
      for (double& m : mean) m /= static_cast<double>(count_);
      per_row(
          [&](const T* xr, int64_t r) {
            const double m = mean[row_group_[r]];
            if constexpr (std::is_same<T, float>::value) return mvn_squared_deviations_row(xr, run, m);
            double sum = 0;
            for (int64_t i = 0; i < run; ++i) {
              const double d = static_cast<double>(load(xr[i])) - m;
              sum += d * d;
            }
            return sum;
          },
          inv);
      for (double& v : inv) v = 1.0 / (std::sqrt(v / static_cast<double>(count_)) + 1e-9);
      parallel_for(rows, ctx.num_threads, grain, [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          const double m = mean[row_group_[r]], v = inv[row_group_[r]];
          const T* xr = x + r * run;
          T* yr = y + r * run;
          if constexpr (std::is_same<T, float>::value) {
            mvn_normalize_row(xr, yr, run, m, v);
          } else {
            for (int64_t i = 0; i < run; ++i)
              yr[i] = store<T>(static_cast<C>((static_cast<double>(load(xr[i])) - m) * v));
          }
        }
      });
    });
  }

 private:
  std::vector<int64_t> row_group_;
  int64_t count_ = 1, groups_ = 1, run_ = 1;
};

TWINFER_REGISTER_KERNEL("MeanVarianceNormalization", Backend::kCPU, 0, float_supports, make_kernel<MVNKernel>);

// ---- Hardmax -----------------------------------------------------------------

void infer_hardmax(InferContext& c) {
  if (c.input_has_shape(0)) {
    const int64_t rank = static_cast<int64_t>(c.input_shape(0).size());
    const int64_t axis = c.node().attr_int("axis", c.opset() >= 13 ? -1 : 1);
    normalize_axis(c, axis, std::max<int64_t>(rank, 1));
  }
  infer_float_same(c);
}

TWINFER_REGISTER_SCHEMA("Hardmax", infer_hardmax);

class HardmaxKernel final : public Kernel {
 public:
  explicit HardmaxKernel(const KernelBuildInfo& info) : g_(nn::softmax_geom(info)) {}
  const char* impl_name() const override { return "cpu loop"; }

  void run(KernelContext& ctx) const override {
    dispatch_any_float(ctx.inputs[0].dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = compute_t<T>;
      const T* x = ctx.inputs[0].as<T>();
      T* y = ctx.outputs[0].as<T>();
      const int64_t L = g_.len, I = g_.inner;
      if (L == 0) return;
      parallel_for(g_.outer * I, ctx.num_threads, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, L)),
                   [&](int64_t lo, int64_t hi) {
                          for (int64_t r = lo; r < hi; ++r) {
                            const int64_t base = (r / I) * L * I + r % I;
                            int64_t best = 0;
                            C m = load(x[base]);
                            for (int64_t i = 1; i < L; ++i) {
                              const C v = load(x[base + i * I]);
                              if (v > m || (std::isnan(v) && !std::isnan(m))) {
                                m = v;
                                best = i;
                              }
                            }
                            for (int64_t i = 0; i < L; ++i) y[base + i * I] = store<T>(C(i == best ? 1 : 0));
                          }
                        });
    });
  }

 private:
  nn::SoftmaxGeom g_;
};

TWINFER_REGISTER_KERNEL("Hardmax", Backend::kCPU, 0, float_supports, make_kernel<HardmaxKernel>);

}  // namespace
}  // namespace twinfer::tx
