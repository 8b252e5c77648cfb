// Resize (opsets 10-19) and Upsample (1-10): shape rule and CPU kernel.
//
// Semantics follow the ONNX reference (onnx/reference/ops/op_resize.py):
// output sizes are floor(in * scale) for scales, `sizes` as given (or the
// keep_aspect_ratio_policy rounding) otherwise; every output coordinate is
// mapped to an input coordinate x by coordinate_transformation_mode
// (computed in float64 like the reference), then
//   nearest  one tap picked by nearest_mode,
//   linear   2 taps (or 2*ceil(1/scale) with antialias when downsampling),
//   cubic    4 taps of Keys' kernel with cubic_coeff_a (antialias widens it),
// taps outside the input clamped to the edge (or dropped and the rest
// renormalised with exclude_outside); tf_crop_and_resize writes
// extrapolation_value where x falls outside the input. Resize-10 and
// Upsample use asymmetric coordinates and onnxruntime's "simple" nearest
// rounding (ceil when downsampling, else floor).
//
// Execution: nearest is a pure gather (any dtype, bit exact) with row reuse
// for upsampling and a dedicated 2x column repeat. linear/cubic are
// separable: one pass per resized axis, each output line a weighted sum of
// input lines (contiguous inner loops vectorise). When leading axes are not
// resized (N, C of NCHW) every thread resizes whole planes with per-thread
// buffers that stay in cache; otherwise the passes are threaded themselves.
// Per-axis tap tables are built once when scales/sizes/roi are constants
// (the usual case), else at each run from the input values.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "ops/elementwise/scalar.h"
#include "ops/elementwise/typeset.h"
#include "ops/tensor/tensor_util.h"
#include "ops/vision/resize_plan.h"

namespace twinfer::vision {
namespace {

enum class Mode { kNearest, kLinear, kCubic };
enum class Coord {
  kHalfPixel, kHalfPixelSymmetric, kPytorchHalfPixel, kAlignCorners, kAsymmetric, kTfCrop, kTfHalfPixelForNN
};
enum class Nearest { kRoundPreferFloor, kRoundPreferCeil, kFloor, kCeil, kSimple };
enum class Policy { kStretch, kNotLarger, kNotSmaller };

struct Attrs {
  Mode mode = Mode::kNearest;
  Coord coord = Coord::kHalfPixel;
  Nearest nearest = Nearest::kRoundPreferFloor;
  double cubic_a = -0.75;
  bool exclude_outside = false;
  double extrapolation = 0.0;
  bool antialias = false;
  Policy policy = Policy::kStretch;
  std::vector<int64_t> axes;  // as given (may be negative); empty: all
  // Where scales/sizes/roi come from: input index, or -1.
  int roi_in = -1, scales_in = -1, sizes_in = -1;
  bool scales_attr = false;   // Upsample < 9: scales are attributes
  std::vector<float> scales;  // the attribute scales
};

template <typename Ctx>
Attrs parse_attrs(const Ctx& c) {
  const graph::Node& n = c.node();
  const int64_t opset = c.opset();
  const bool upsample = n.op_type == "Upsample";
  Attrs a;
  const std::string mode = n.attr_string("mode", "nearest");
  if (mode == "nearest")
    a.mode = Mode::kNearest;
  else if (mode == "linear" || mode == "bilinear")
    a.mode = Mode::kLinear;
  else if (mode == "cubic" && !upsample && opset >= 11)
    a.mode = Mode::kCubic;
  else
    c.fail(ErrorKind::kUnsupportedOp, "mode '" + mode + "' is not supported");
  if (upsample || opset < 11) {
    a.coord = Coord::kAsymmetric;
    a.nearest = Nearest::kSimple;
    if (upsample && opset < 7) {
      a.scales_attr = true;
      a.scales = {1.f, 1.f, n.attr_float("height_scale", 1.f), n.attr_float("width_scale", 1.f)};
    } else if (upsample && opset < 9) {
      a.scales_attr = true;
      a.scales = n.attr_floats("scales");
    } else {
      a.scales_in = 1;
    }
    return a;
  }
  a.roi_in = 1;
  a.scales_in = 2;
  a.sizes_in = 3;
  const std::string coord = n.attr_string("coordinate_transformation_mode", "half_pixel");
  if (coord == "half_pixel") a.coord = Coord::kHalfPixel;
  else if (coord == "half_pixel_symmetric" && opset >= 19) a.coord = Coord::kHalfPixelSymmetric;
  else if (coord == "pytorch_half_pixel") a.coord = Coord::kPytorchHalfPixel;
  else if (coord == "align_corners") a.coord = Coord::kAlignCorners;
  else if (coord == "asymmetric") a.coord = Coord::kAsymmetric;
  else if (coord == "tf_crop_and_resize") a.coord = Coord::kTfCrop;
  else if (coord == "tf_half_pixel_for_nn" && opset < 13) a.coord = Coord::kTfHalfPixelForNN;
  else c.fail(ErrorKind::kUnsupportedOp, "coordinate_transformation_mode '" + coord + "' is not supported");
  const std::string nm = n.attr_string("nearest_mode", "round_prefer_floor");
  if (nm == "round_prefer_floor") a.nearest = Nearest::kRoundPreferFloor;
  else if (nm == "round_prefer_ceil") a.nearest = Nearest::kRoundPreferCeil;
  else if (nm == "floor") a.nearest = Nearest::kFloor;
  else if (nm == "ceil") a.nearest = Nearest::kCeil;
  else c.fail(ErrorKind::kUnsupportedOp, "nearest_mode '" + nm + "' is not supported");
  a.cubic_a = n.attr_float("cubic_coeff_a", -0.75f);
  a.exclude_outside = n.attr_int("exclude_outside", 0) != 0;
  a.extrapolation = n.attr_float("extrapolation_value", 0.f);
  if (opset >= 18) {
    a.antialias = n.attr_int("antialias", 0) != 0;
    if (a.antialias && a.mode == Mode::kNearest)
      c.fail(ErrorKind::kUnsupportedOp, "antialias is not defined for mode 'nearest'");
    if (n.has_attr("axes")) a.axes = n.attr_ints("axes");
    const std::string p = n.attr_string("keep_aspect_ratio_policy", "stretch");
    if (p == "stretch") a.policy = Policy::kStretch;
    else if (p == "not_larger") a.policy = Policy::kNotLarger;
    else if (p == "not_smaller") a.policy = Policy::kNotSmaller;
    else c.fail(ErrorKind::kUnsupportedOp, "keep_aspect_ratio_policy '" + p + "' is not supported");
  }
  return a;
}

// Values of a float input (scales, roi) as doubles.
std::vector<double> float_values(const TensorView& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  switch (t.dtype) {
    case DType::kFloat32: for (size_t i = 0; i < v.size(); ++i) v[i] = t.as<const float>()[i]; break;
    case DType::kFloat64: for (size_t i = 0; i < v.size(); ++i) v[i] = t.as<const double>()[i]; break;
    case DType::kFloat16: for (size_t i = 0; i < v.size(); ++i) v[i] = half_to_float(t.as<const half_t>()[i].bits); break;
    case DType::kBFloat16: for (size_t i = 0; i < v.size(); ++i) v[i] = bf16_to_float(t.as<const bfloat16_t>()[i].bits); break;
    default: throw Error(ErrorKind::kDType, std::string("expected float values, got ") + dtype_name(t.dtype));
  }
  return v;
}

// The values scales/sizes/roi hold (whichever apply), read from constants
// or run-time views.
struct Params {
  bool use_sizes = false;
  std::vector<double> scales;   // per listed axis
  std::vector<int64_t> sizes;   // per listed axis
  std::vector<double> roi;      // [starts..., ends...] per listed axis, or empty
};

// Output sizes and per-axis scales of an input shape. `in` dims may be -1
// (unknown) in shape rules, giving -1 outputs where they matter.
struct Geometry {
  std::vector<int64_t> out;
  std::vector<double> scale;
  std::vector<double> roi_start, roi_end;  // per axis (0, 1 when not given)
};

template <typename Ctx>
std::vector<int64_t> resolve_axes(const Ctx& c, const Attrs& a, int64_t rank) {
  if (a.axes.empty()) {
    std::vector<int64_t> all(static_cast<size_t>(rank));
    for (int64_t i = 0; i < rank; ++i) all[i] = i;
    return all;
  }
  return tensor::normalize_axes(c, a.axes, rank);
}

template <typename Ctx>
Geometry geometry(const Ctx& c, const Attrs& a, const std::vector<int64_t>& in, const Params& p) {
  const int64_t rank = static_cast<int64_t>(in.size());
  const std::vector<int64_t> axes = resolve_axes(c, a, rank);
  const size_t na = axes.size();
  Geometry g;
  g.out = in;
  g.scale.assign(in.size(), 1.0);
  g.roi_start.assign(in.size(), 0.0);
  g.roi_end.assign(in.size(), 1.0);
  if (a.coord == Coord::kTfCrop && !p.roi.empty()) {
    if (p.roi.size() != 2 * na)
      c.fail(ErrorKind::kShape, "roi has " + std::to_string(p.roi.size()) + " values, expected " +
                                    std::to_string(2 * na));
    for (size_t i = 0; i < na; ++i) {
      g.roi_start[axes[i]] = p.roi[i];
      g.roi_end[axes[i]] = p.roi[na + i];
    }
  }
  if (p.use_sizes) {
    if (p.sizes.size() != na)
      c.fail(ErrorKind::kShape, "sizes has " + std::to_string(p.sizes.size()) + " values for " +
                                    std::to_string(na) + " axes");
    for (size_t i = 0; i < na; ++i) {
      if (p.sizes[i] < 0) c.fail(ErrorKind::kInvalidArgument, "sizes must be >= 0");
      const int64_t d = in[axes[i]];
      g.out[axes[i]] = p.sizes[i];
      g.scale[axes[i]] = d > 0 ? static_cast<double>(p.sizes[i]) / static_cast<double>(d) : 1.0;
    }
    if (a.policy != Policy::kStretch) {
      double s = a.policy == Policy::kNotLarger ? std::numeric_limits<double>::infinity() : 0.0;
      bool known = true;
      for (size_t i = 0; i < na; ++i) {
        known = known && in[axes[i]] >= 0;
        s = a.policy == Policy::kNotLarger ? std::min(s, g.scale[axes[i]]) : std::max(s, g.scale[axes[i]]);
      }
      for (size_t i = 0; i < na; ++i) {
        const int64_t d = in[axes[i]];
        g.scale[axes[i]] = s;
        g.out[axes[i]] = known ? static_cast<int64_t>(s * static_cast<double>(d) + 0.5) : -1;
      }
    }
  } else {
    if (p.scales.size() != na)
      c.fail(ErrorKind::kShape, "scales has " + std::to_string(p.scales.size()) + " values for " +
                                    std::to_string(na) + " axes");
    for (size_t i = 0; i < na; ++i) {
      const double s = p.scales[i];
      if (!(s > 0) || !std::isfinite(s))
        c.fail(ErrorKind::kInvalidArgument, "scales must be positive, got " + std::to_string(s));
      const int64_t d = in[axes[i]];
      g.scale[axes[i]] = s;
      g.out[axes[i]] = d < 0 ? -1 : static_cast<int64_t>(std::floor(s * static_cast<double>(d)));
    }
  }
  return g;
}

// Reads the parameters from constants. false when one needed is not
// constant (or its emptiness is not known).
bool const_params(const InferContext& c, const Attrs& a, Params* p) {
  if (a.scales_attr) {
    p->scales.assign(a.scales.begin(), a.scales.end());
    return true;
  }
  auto empty_input = [&](int i) {
    if (i < 0 || !c.has_input(i)) return true;
    if (!c.input_has_shape(i)) return false;
    const SymShape& s = c.input_shape(i);
    return s.size() == 1 && s[0].known() && s[0].value == 0;
  };
  auto nonempty_known = [&](int i) {
    if (i < 0 || !c.has_input(i)) return false;
    if (c.input_constant(i)) return c.input_constant(i)->numel() > 0;
    if (!c.input_has_shape(i)) return false;
    const SymShape& s = c.input_shape(i);
    return s.size() == 1 && s[0].known() && s[0].value > 0;
  };
  if (nonempty_known(a.sizes_in)) {
    p->use_sizes = true;
    if (!c.constant_ints(a.sizes_in, &p->sizes)) return false;
  } else if (empty_input(a.sizes_in) || (a.sizes_in >= 0 && c.input_constant(a.sizes_in))) {
    if (a.scales_in < 0 || !c.has_input(a.scales_in))
      c.fail(ErrorKind::kModelFormat, "one of scales and sizes must be given");
    const Tensor* s = c.input_constant(a.scales_in);
    if (!s) return false;
    p->scales = float_values(s->view());
    if (p->scales.empty()) c.fail(ErrorKind::kModelFormat, "one of scales and sizes must be given");
  } else {
    return false;
  }
  if (a.coord == Coord::kTfCrop && a.roi_in >= 0 && c.has_input(a.roi_in)) {
    const Tensor* r = c.input_constant(a.roi_in);
    if (!r) return true;  // the roi does not change the output shape
    p->roi = float_values(r->view());
  }
  return true;
}

void resize_infer(InferContext& c) {
  const DType dt = c.input_dtype(0);
  const Attrs a = parse_attrs(c);
  if (a.mode != Mode::kNearest)
    if (!(ew::in_typeset(ew::kNumericTypes, dt)))
      c.fail(ErrorKind::kDType, std::string("linear/cubic Resize does not support ") + dtype_name(dt));
  if (!c.input_has_shape(0)) return c.set_output_rank_unknown(0, dt);
  const SymShape& xs = c.input_shape(0);
  std::vector<int64_t> in;
  for (const Dim& d : xs) in.push_back(d.known() ? d.value : -1);
  Params p;
  if (!const_params(c, a, &p)) {
    // Unknown values; the rank is known, and dims on no listed axis keep theirs.
    const std::vector<int64_t> axes = resolve_axes(c, a, static_cast<int64_t>(xs.size()));
    SymShape out = xs;
    for (int64_t ax : axes) out[ax] = Dim();
    return c.set_output(0, dt, out);
  }
  const Geometry g = geometry(c, a, in, p);
  SymShape out(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    if (g.out[i] >= 0) out[i] = Dim(g.out[i]);
    else if (g.scale[i] == 1.0 && !p.use_sizes) out[i] = xs[i];
  }
  c.set_output(0, dt, out);
}

// ---- tap tables ----------------------------------------------------------------

struct Axis {
  int64_t in = 1, out = 1;
  bool identity = true;
  int taps = 1;
  std::vector<int64_t> idx;   // out * taps, clamped into [0, in); nearest: -1 = fill
  std::vector<float> wf;      // out * taps
  std::vector<double> wd;
  std::vector<uint8_t> fill;  // out: 1 = extrapolated (write the fill value)
};

double keys(double d, double A) {
  d = std::fabs(d);
  if (d <= 1) return ((A + 2) * d - (A + 3)) * d * d + 1;
  if (d < 2) return ((A * d - 5 * A) * d + 8 * A) * d - 4 * A;
  return 0.0;
}

Axis make_axis(const Attrs& a, int64_t in, int64_t out, double s, double roi0, double roi1) {
  Axis ax;
  ax.in = in;
  ax.out = out;
  const bool crop = a.coord == Coord::kTfCrop;
  ax.identity = out == in && std::fabs(s - 1.0) <= 1e-9 && (!crop || (std::fabs(roi0) <= 1e-9 && std::fabs(roi1 - 1.0) <= 1e-9));
  if (ax.identity) return ax;
  const double owidth = s * static_cast<double>(in);
  const double fin = static_cast<double>(in);
  int n = 1;
  double aa = 1.0;  // the kernel's scale: widened when downsampling with antialias
  if (a.mode == Mode::kLinear || a.mode == Mode::kCubic) {
    const double half = a.mode == Mode::kLinear ? 1.0 : 2.0;
    n = static_cast<int>(2 * half);
    if (a.antialias) {
      aa = std::min(s, 1.0);
      const int64_t start = static_cast<int64_t>(std::floor(-half / aa)) + 1;
      n = static_cast<int>(2 - 2 * start);
    }
  }
  ax.taps = n;
  ax.idx.assign(static_cast<size_t>(out * n), 0);
  ax.wd.assign(static_cast<size_t>(out * n), 0.0);
  ax.fill.assign(static_cast<size_t>(out), 0);
  std::vector<double> w(n);
  for (int64_t o = 0; o < out; ++o) {
    const double y = static_cast<double>(o);
    double x = 0;
    switch (a.coord) {
      case Coord::kHalfPixel: x = (y + 0.5) / s - 0.5; break;
      case Coord::kHalfPixelSymmetric: {
        const double adj = static_cast<double>(out) / owidth;
        x = fin / 2 * (1 - adj) + (y + 0.5) / s - 0.5;
        break;
      }
      case Coord::kPytorchHalfPixel: x = owidth == 1.0 ? -0.5 : (y + 0.5) / s - 0.5; break;
      case Coord::kAlignCorners: x = owidth == 1.0 ? 0.0 : y * (fin - 1) / (owidth - 1); break;
      case Coord::kAsymmetric: x = y / s; break;
      case Coord::kTfHalfPixelForNN: x = (y + 0.5) / s; break;
      case Coord::kTfCrop:
        x = owidth == 1.0 ? (roi1 - roi0) * (fin - 1) / 2 : y * (roi1 - roi0) * (fin - 1) / (owidth - 1);
        x += roi0 * (fin - 1);
        if (x < 0 || x > fin - 1) ax.fill[o] = 1;
        break;
    }
    int64_t* id = &ax.idx[o * n];
    double* wo = &ax.wd[o * n];
    const double fl = std::floor(x);
    const bool integral = x == fl;
    if (a.mode == Mode::kNearest) {
      int64_t i;
      const double frac = x - fl;
      switch (a.nearest) {
        case Nearest::kRoundPreferFloor: i = static_cast<int64_t>(integral || frac <= 0.5 ? fl : fl + 1); break;
        case Nearest::kRoundPreferCeil: i = static_cast<int64_t>(integral || frac < 0.5 ? fl : fl + 1); break;
        case Nearest::kFloor: i = static_cast<int64_t>(fl); break;
        case Nearest::kCeil: i = static_cast<int64_t>(std::ceil(x)); break;
        default: i = static_cast<int64_t>(s < 1.0 ? std::ceil(x) : std::trunc(x)); break;
      }
      if (i < 0 || i >= in) i = a.exclude_outside ? -1 : std::clamp<int64_t>(i, 0, in - 1);
      id[0] = i;
      wo[0] = 1.0;
      continue;
    }
    const int64_t first = integral ? static_cast<int64_t>(fl) - n / 2 : static_cast<int64_t>(fl) - n / 2 + 1;
    double sum = 0;
    for (int k = 0; k < n; ++k) {
      const double d = (static_cast<double>(first + k) - x) * aa;
      w[k] = a.mode == Mode::kLinear ? std::max(0.0, 1.0 - std::fabs(d)) : keys(d, a.cubic_a);
      sum += w[k];
    }
    if (a.antialias && sum != 0)
      for (int k = 0; k < n; ++k) w[k] /= sum;
    if (a.exclude_outside) {
      sum = 0;
      for (int k = 0; k < n; ++k) {
        if (first + k < 0 || first + k >= in) w[k] = 0;
        sum += w[k];
      }
      if (sum != 0)
        for (int k = 0; k < n; ++k) w[k] /= sum;
    }
    for (int k = 0; k < n; ++k) {
      id[k] = std::clamp<int64_t>(first + k, 0, in - 1);
      wo[k] = w[k];
    }
  }
  ax.wf.assign(ax.wd.begin(), ax.wd.end());
  return ax;
}

// ---- the plan -------------------------------------------------------------------

struct Plan {
  Shape in, out;
  std::vector<Axis> axes;  // per dim
  size_t lead = 0;         // leading dims not resized (the independent "planes")
};

template <typename Ctx>
Plan make_plan(const Ctx& c, const Attrs& a, const Shape& in, const Params& p) {
  Geometry g = geometry(c, a, std::vector<int64_t>(in.begin(), in.end()), p);
  Plan pl;
  pl.in = in;
  pl.out = Shape(g.out.begin(), g.out.end());
  for (size_t d = 0; d < in.size(); ++d) {
    if (in[d] == 0 && pl.out[d] != 0)
      c.fail(ErrorKind::kInvalidArgument, "cannot resize an empty dim to " + std::to_string(pl.out[d]));
    pl.axes.push_back(make_axis(a, in[d], pl.out[d], g.scale[d], g.roi_start[d], g.roi_end[d]));
  }
  while (pl.lead < in.size() && pl.axes[pl.lead].identity) ++pl.lead;
  return pl;
}

// Converts the compute value to the output type: rounded to nearest even and
// saturated for integers (as the reference's saturate_cast).
template <typename D, typename C>
inline D to_out(C v) {
  if constexpr (std::is_integral_v<D>) {
    v = std::nearbyint(v);
    const C lo = static_cast<C>(std::numeric_limits<D>::lowest());
    const C hi = static_cast<C>(std::numeric_limits<D>::max());
    if (!(v >= lo)) return std::numeric_limits<D>::lowest();
    if (v >= hi) return std::numeric_limits<D>::max();
    return static_cast<D>(v);
  } else {
    return ew::store<D>(v);
  }
}

template <typename T>
T typed_value(double v) {
  if constexpr (std::is_same_v<T, bool>) return v != 0;
  else return to_out<T>(static_cast<ew::compute_t<T>>(v));
}

// Scratch buffers of one thread, grown on demand and kept.
std::vector<double>& tl_buffer(int k) {
  thread_local std::vector<double> bufs[3];
  return bufs[k];
}
template <typename C>
C* tl_get(int k, size_t n) {
  std::vector<double>& b = tl_buffer(k);
  const size_t words = (n * sizeof(C) + sizeof(double) - 1) / sizeof(double);
  if (b.size() < words) b.resize(words);
  return reinterpret_cast<C*>(b.data());
}

template <typename C> const std::vector<C>& weights(const Axis& a);
template <> const std::vector<float>& weights<float>(const Axis& a) { return a.wf; }
template <> const std::vector<double>& weights<double>(const Axis& a) { return a.wd; }

// One separable pass: dst[o2][o][i] = sum_k w[o][k] * src[o2][idx[o][k]][i].
template <typename S, typename D, typename C>
void pass(const S* src, D* dst, int64_t outer, int64_t inner, const Axis& ax, C fill, int threads) {
  const int n = ax.taps;
  const int64_t in = ax.in, out = ax.out;
  const int64_t* idx = ax.idx.data();
  const C* w = weights<C>(ax).data();
  const uint8_t* fl = ax.fill.data();
  if (inner == 1) {
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, out * n));
    parallel_for(outer, threads, grain, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const S* s = src + r * in;
        D* d = dst + r * out;
        if (n == 2) {
          for (int64_t o = 0; o < out; ++o) {
            const C v = w[2 * o] * static_cast<C>(ew::load(s[idx[2 * o]])) +
                        w[2 * o + 1] * static_cast<C>(ew::load(s[idx[2 * o + 1]]));
            d[o] = to_out<D>(fl[o] ? fill : v);
          }
        } else {
          for (int64_t o = 0; o < out; ++o) {
            C v = 0;
            for (int k = 0; k < n; ++k) v += w[o * n + k] * static_cast<C>(ew::load(s[idx[o * n + k]]));
            d[o] = to_out<D>(fl[o] ? fill : v);
          }
        }
      }
    });
    return;
  }
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, inner * n));
  parallel_for(outer * out, threads, grain, [&](int64_t b, int64_t e) {
    C* acc = std::is_same_v<D, C> ? nullptr : tl_get<C>(2, static_cast<size_t>(inner));
    for (int64_t r = b; r < e; ++r) {
      const int64_t o2 = r / out, o = r - o2 * out;
      D* d = dst + r * inner;
      C* a = std::is_same_v<D, C> ? reinterpret_cast<C*>(d) : acc;
      if (fl[o]) {
        for (int64_t i = 0; i < inner; ++i) a[i] = fill;
      } else {
        const S* base = src + o2 * in * inner;
        const S* s0 = base + idx[o * n] * inner;
        const C w0 = w[o * n];
        if (n == 2) {
          const S* s1 = base + idx[o * n + 1] * inner;
          const C w1 = w[o * n + 1];
          for (int64_t i = 0; i < inner; ++i)
            a[i] = w0 * static_cast<C>(ew::load(s0[i])) + w1 * static_cast<C>(ew::load(s1[i]));
        } else {
          for (int64_t i = 0; i < inner; ++i) a[i] = w0 * static_cast<C>(ew::load(s0[i]));
          for (int k = 1; k < n; ++k) {
            const S* sk = base + idx[o * n + k] * inner;
            const C wk = w[o * n + k];
            for (int64_t i = 0; i < inner; ++i) a[i] += wk * static_cast<C>(ew::load(sk[i]));
          }
        }
      }
      if constexpr (!std::is_same_v<D, C>)
        for (int64_t i = 0; i < inner; ++i) d[i] = to_out<D>(a[i]);
    }
  });
}

// Runs every pass of dims [lead, rank) on one block (x: in-block, y: out-block).
template <typename T, typename C>
void interpolate_block(const Plan& pl, size_t lead, const T* x, T* y, int64_t outer0, C fill, int threads,
                       C* buf0, C* buf1) {
  std::vector<size_t> dims;
  for (size_t d = lead; d < pl.in.size(); ++d)
    if (!pl.axes[d].identity) dims.push_back(d);
  if (dims.empty()) {  // every axis maps onto itself (a resize to the size it has): a copy, not nothing
    std::copy(x, x + outer0 * shape_numel(Shape(pl.in.begin() + lead, pl.in.end())), y);
    return;
  }
  Shape cur(pl.in.begin(), pl.in.end());
  const void* src = x;
  bool src_is_t = true;
  for (size_t k = 0; k < dims.size(); ++k) {
    const size_t d = dims[k];
    int64_t outer = outer0, inner = 1;
    for (size_t j = lead; j < d; ++j) outer *= cur[j];
    for (size_t j = d + 1; j < cur.size(); ++j) inner *= cur[j];
    const bool last = k + 1 == dims.size();
    C* scratch = (k % 2 == 0) ? buf0 : buf1;
    const Axis& ax = pl.axes[d];
    if (src_is_t) {
      if (last) pass<T, T, C>(static_cast<const T*>(src), y, outer, inner, ax, fill, threads);
      else pass<T, C, C>(static_cast<const T*>(src), scratch, outer, inner, ax, fill, threads);
    } else {
      if (last) pass<C, T, C>(static_cast<const C*>(src), y, outer, inner, ax, fill, threads);
      else pass<C, C, C>(static_cast<const C*>(src), scratch, outer, inner, ax, fill, threads);
    }
    src = scratch;
    src_is_t = false;
    cur[d] = pl.out[d];
  }
}

// Largest intermediate (elements) of the passes over dims [lead, rank), per outer block.
int64_t max_intermediate(const Plan& pl, size_t lead) {
  Shape cur = pl.in;
  int64_t best = 0;
  std::vector<size_t> dims;
  for (size_t d = lead; d < pl.in.size(); ++d)
    if (!pl.axes[d].identity) dims.push_back(d);
  for (size_t k = 0; k + 1 < dims.size(); ++k) {
    cur[dims[k]] = pl.out[dims[k]];
    best = std::max(best, shape_numel(Shape(cur.begin() + lead, cur.end())));
  }
  return best;
}

template <typename T>
void run_interpolate(const Plan& pl, const T* x, T* y, double fill_d, int threads) {
  using C = std::conditional_t<std::is_same_v<T, double> || std::is_same_v<T, int64_t> ||
                                   std::is_same_v<T, uint64_t> || std::is_same_v<T, int32_t> ||
                                   std::is_same_v<T, uint32_t>,
                               double, float>;
  const C fill = static_cast<C>(fill_d);
  int64_t planes = 1;
  for (size_t d = 0; d < pl.lead; ++d) planes *= pl.in[d];
  const int64_t in_block = shape_numel(Shape(pl.in.begin() + pl.lead, pl.in.end()));
  const int64_t out_block = shape_numel(Shape(pl.out.begin() + pl.lead, pl.out.end()));
  const int64_t inter = max_intermediate(pl, pl.lead);
  if (planes >= threads || threads <= 1) {
    // Whole blocks per thread: buffers stay in cache.
    const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, out_block));
    parallel_for(planes, threads, grain, [&](int64_t b, int64_t e) {
      C* b0 = tl_get<C>(0, static_cast<size_t>(inter));
      C* b1 = tl_get<C>(1, static_cast<size_t>(inter));
      for (int64_t p = b; p < e; ++p)
        interpolate_block<T, C>(pl, pl.lead, x + p * in_block, y + p * out_block, 1, fill, 1, b0, b1);
    });
  } else {
    const int64_t all = planes * inter;
    C* b0 = tl_get<C>(0, static_cast<size_t>(all));
    C* b1 = tl_get<C>(1, static_cast<size_t>(all));
    interpolate_block<T, C>(pl, pl.lead, x, y, planes, fill, threads, b0, b1);
  }
}

// Nearest: a gather of elements of E bytes (the dims after `gdims` that are
// not resized fold into one element).
void run_nearest(const Plan& pl, const void* xv, void* yv, size_t esize, const void* fill_bytes, int threads) {
  const size_t r = pl.in.size();
  size_t g = r;  // dims [g, r) not resized: folded into the element
  while (g > 0 && pl.axes[g - 1].identity) --g;
  size_t elem = esize;
  for (size_t d = g; d < r; ++d) elem *= static_cast<size_t>(pl.in[d]);
  const char* x = static_cast<const char*>(xv);
  char* y = static_cast<char*>(yv);
  if (g == 0) {
    std::memcpy(y, x, elem);
    return;
  }
  // Index tables of dims [0, g): identity dims get iota.
  std::vector<std::vector<int64_t>> maps(g);
  Shape in_str(g), out_dims(g);
  int64_t s = 1;
  for (size_t d = g; d-- > 0;) {
    in_str[d] = s;
    s *= pl.in[d];
    out_dims[d] = pl.out[d];
    const Axis& ax = pl.axes[d];
    maps[d].resize(static_cast<size_t>(pl.out[d]));
    for (int64_t o = 0; o < pl.out[d]; ++o)
      maps[d][o] = ax.identity ? o : (ax.fill[o] ? -1 : ax.idx[o]);
  }
  const int64_t W = out_dims[g - 1];
  const std::vector<int64_t>& wmap = maps[g - 1];
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < g; ++d) rows *= out_dims[d];
  // Column pattern: an exact k-fold repeat lets the inner loop skip the table.
  int64_t rep = 0;
  const int64_t win = g >= 1 ? pl.in[g - 1] : 1;
  if (W == 2 * win) {
    rep = 2;
    for (int64_t o = 0; o < W && rep; ++o)
      if (wmap[o] != o / 2) rep = 0;
  }
  const size_t row_bytes = static_cast<size_t>(W) * elem;
  auto fill_row = [&](char* dst, int64_t count) {
    for (int64_t i = 0; i < count; ++i) std::memcpy(dst + i * elem, fill_bytes, elem);
  };
  auto gather_row = [&](const char* src, char* dst) {
    auto typed = [&](auto tag) {
      using E = typename decltype(tag)::type;
      const E* sp = reinterpret_cast<const E*>(src);
      E* dp = reinterpret_cast<E*>(dst);
      if (rep == 2) {
        for (int64_t i = 0; i < win; ++i) {
          const E v = sp[i];
          dp[2 * i] = v;
          dp[2 * i + 1] = v;
        }
        return;
      }
      const E fv = *reinterpret_cast<const E*>(fill_bytes);
      for (int64_t o = 0; o < W; ++o) {
        const int64_t i = wmap[o];
        dp[o] = i < 0 ? fv : sp[i];
      }
    };
    switch (elem) {
      case 1: return typed(TypeTag<uint8_t>{});
      case 2: return typed(TypeTag<uint16_t>{});
      case 4: return typed(TypeTag<uint32_t>{});
      case 8: return typed(TypeTag<uint64_t>{});
      default:
        for (int64_t o = 0; o < W; ++o) {
          const int64_t i = wmap[o];
          if (i < 0) fill_row(dst + o * elem, 1);
          else std::memcpy(dst + o * elem, src + i * elem, elem);
        }
    }
  };
  const int64_t grain = std::max<int64_t>(1, tensor::kCopyGrain / std::max<int64_t>(1, static_cast<int64_t>(row_bytes)));
  parallel_for(rows, threads, grain, [&](int64_t b, int64_t e) {
    int64_t prev_src = -2;
    const char* prev_row = nullptr;
    for (int64_t r0 = b; r0 < e; ++r0) {
      int64_t rem = r0, off = 0;
      bool filled = false;
      for (size_t d = g - 1; d-- > 0;) {
        const int64_t o = rem % out_dims[d];
        rem /= out_dims[d];
        const int64_t i = maps[d][o];
        if (i < 0) filled = true;
        else off += i * in_str[d];
      }
      char* dst = y + r0 * row_bytes;
      if (filled) {
        fill_row(dst, W);
        continue;
      }
      if (off == prev_src && prev_row) {
        std::memcpy(dst, prev_row, row_bytes);
      } else {
        gather_row(x + off * static_cast<int64_t>(elem), dst);
      }
      prev_src = off;
      prev_row = dst;
    }
  });
}

class ResizeKernel final : public ResizePlanKernel {
 public:
  explicit ResizeKernel(const KernelBuildInfo& info)
      : node_(info.node().name), op_(info.node().op_type), attrs_(parse_attrs(info)), dtype_(info.input_dtype(0)),
        in_(info.input_shape(0)), out_(info.output_shape(0)) {
    Params p;
    if (const_params(info, &p)) {
      plan_ = std::make_unique<Plan>(make_plan(info, attrs_, in_, p));
      check_out(info, *plan_);
    }
    fill_bits_ = 0;
    ew::dispatch_typeset<ew::kAllTypes>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T v = typed_value<T>(attrs_.extrapolation);
      std::memcpy(&fill_bits_, &v, sizeof(T));
    });
  }

  const char* impl_name() const override { return "cpu loop"; }

  bool fixed_plan() const override { return plan_ != nullptr; }
  bool nearest() const override { return attrs_.mode == Mode::kNearest; }
  std::vector<ResizeAxisTaps> axis_taps() const override {
    std::vector<ResizeAxisTaps> r;
    if (!plan_) return r;
    for (const Axis& ax : plan_->axes) {
      ResizeAxisTaps t;
      t.identity = ax.identity;
      t.taps = ax.taps;
      t.index = ax.idx;
      t.weight = ax.wf;
      t.fill = ax.fill;
      if (!ax.identity && nearest())  // as run_nearest reads the tables
        for (size_t o = 0; o < ax.fill.size(); ++o)
          if (ax.fill[o]) t.index[o] = -1;
      r.push_back(std::move(t));
    }
    return r;
  }
  const Shape& input_shape() const override { return in_; }
  const Shape& output_shape() const override { return out_; }
  uint64_t fill_bits() const override { return fill_bits_; }

  void run(KernelContext& ctx) const override {
    if (shape_numel(out_) == 0) return;
    if (plan_) return execute(*plan_, ctx);
    // Parameters fed at run time: build the tables now.
    Params p = runtime_params(ctx);
    RunCtx rc{node_, op_};
    Plan pl = make_plan(rc, attrs_, in_, p);
    if (pl.out != out_)
      throw Error(ErrorKind::kShape, "output " + shape_str(pl.out) + " differs from the planned " + shape_str(out_),
                  node_, op_);
    execute(pl, ctx);
  }

 private:
  // What geometry()/make_plan() need of a context at run time.
  struct RunCtx {
    const std::string& node;
    const std::string& op;
    [[noreturn]] void fail(ErrorKind k, const std::string& m) const { throw Error(k, m, node, op); }
  };

  bool const_params(const KernelBuildInfo& info, Params* p) const {
    const Attrs& a = attrs_;
    if (a.scales_attr) {
      p->scales.assign(a.scales.begin(), a.scales.end());
      return true;
    }
    const bool has_sizes = a.sizes_in >= 0 && info.has_input(a.sizes_in) && shape_numel(info.input_shape(a.sizes_in)) > 0;
    if (has_sizes) {
      p->use_sizes = true;
      if (!tensor::const_ints(info, a.sizes_in, &p->sizes)) return false;
    } else {
      if (a.scales_in < 0 || !info.has_input(a.scales_in)) info.fail(ErrorKind::kModelFormat, "one of scales and sizes must be given");
      const Tensor* s = info.input_constant(a.scales_in);
      if (!s) return false;
      p->scales = float_values(s->view());
    }
    if (a.coord == Coord::kTfCrop && a.roi_in >= 0 && info.has_input(a.roi_in)) {
      const Tensor* r = info.input_constant(a.roi_in);
      if (!r) return false;
      p->roi = float_values(r->view());
    }
    return true;
  }

  Params runtime_params(const KernelContext& ctx) const {
    const Attrs& a = attrs_;
    Params p;
    auto present = [&](int i) { return i >= 0 && static_cast<size_t>(i) < ctx.inputs.size() && ctx.inputs[i].data; };
    try {
      if (present(a.sizes_in) && ctx.inputs[a.sizes_in].numel() > 0) {
        p.use_sizes = true;
        p.sizes = tensor::view_ints(ctx.inputs[a.sizes_in]);
      } else if (present(a.scales_in)) {
        p.scales = float_values(ctx.inputs[a.scales_in]);
      }
      if (a.coord == Coord::kTfCrop && present(a.roi_in)) p.roi = float_values(ctx.inputs[a.roi_in]);
    } catch (const Error& e) {
      throw Error(e.kind(), e.what(), node_, op_);
    }
    return p;
  }

  void check_out(const KernelBuildInfo& info, const Plan& pl) const {
    if (pl.out != out_)
      info.fail(ErrorKind::kShape, "output " + shape_str(pl.out) + " differs from the inferred " + shape_str(out_));
  }

  void execute(const Plan& pl, KernelContext& ctx) const {
    const void* x = ctx.inputs[0].data;
    void* y = ctx.outputs[0].data;
    if (attrs_.mode == Mode::kNearest)
      return run_nearest(pl, x, y, dtype_size(dtype_), &fill_bits_, ctx.num_threads);
    ew::dispatch_typeset<ew::kNumericTypes>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      run_interpolate<T>(pl, static_cast<const T*>(x), static_cast<T*>(y), attrs_.extrapolation, ctx.num_threads);
    });
  }

  std::string node_, op_;
  Attrs attrs_;
  DType dtype_;
  Shape in_, out_;
  std::unique_ptr<Plan> plan_;
  uint64_t fill_bits_ = 0;
};

bool resize_supports(const KernelBuildInfo& info, std::string* why) {
  const DType dt = info.input_dtype(0);
  const Attrs a = parse_attrs(info);
  const unsigned set = a.mode == Mode::kNearest ? ew::kAllTypes : ew::kNumericTypes;
  if (!ew::in_typeset(set, dt)) {
    *why = info.node().op_type + " does not support " + dtype_name(dt) + " in this mode";
    return false;
  }
  return true;
}

}  // namespace

TWINFER_REGISTER_SCHEMA("Resize", resize_infer);
TWINFER_REGISTER_SCHEMA("Upsample", resize_infer);
TWINFER_REGISTER_KERNEL("Resize", Backend::kCPU, 0, resize_supports, make_kernel<ResizeKernel>);
TWINFER_REGISTER_KERNEL("Upsample", Backend::kCPU, 0, resize_supports, make_kernel<ResizeKernel>);

}  // namespace twinfer::vision
