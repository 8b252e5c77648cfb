// The coordinate math of GridSample and AffineGrid, shared by the CPU kernels
// (grid_sample.cc) and CUDA's (backends/cuda/vision.cu), so the CPU tests
// exercise the arithmetic the GPU runs. No framework headers: nvcc includes
// it as it is.
//
// GridSample, per spatial dim of length L: a normalised coordinate v in
// [-1, 1] is unnormalised in the grid's compute type (gs_unnormalize), then
// in double: nearest rounds half to even; a coordinate past [lo, hi] (the
// pixel centres with align_corners, else the pixel edges) is clamped to the
// edge pixels (border) or reflected (reflection); then 1 (nearest), 2
// (linear) or 4 (cubic, Keys a = -0.75) taps, each tap's index mapped
// through the padding mode (-1: reads zero). A NaN coordinate follows
// gs_nan_coordinate below.
#pragma once
#include <math.h>

#include <cstdint>

#include "core/half.h"

namespace twinfer::vision {

enum class GsMode : int { kNearest, kLinear, kCubic };
enum class GsPad : int { kZeros, kBorder, kReflection };

// Reflects x into [lo, hi] by the nearer border, repeatedly (as the ONNX reference).
TWINFER_HD double gs_reflect(double x, double lo, double hi) {
  const double rng = hi - lo;
  if (rng <= 0) return lo;
  if (x < lo) {
    const double dx = lo - x;
    const int64_t n = static_cast<int64_t>(dx / rng);
    const double r = dx - static_cast<double>(n) * rng;
    return n % 2 == 0 ? lo + r : hi - r;
  }
  if (x > hi) {
    const double dx = x - hi;
    const int64_t n = static_cast<int64_t>(dx / rng);
    const double r = dx - static_cast<double>(n) * rng;
    return n % 2 == 0 ? hi - r : lo + r;
  }
  return x;
}

// Keys cubic kernel (a = -0.75) at distance d.
TWINFER_HD double gs_cubic_kernel(double d) {
  const double A = -0.75;
  d = fabs(d);
  if (d <= 1) return ((A + 2) * d - (A + 3)) * d * d + 1;
  if (d < 2) return ((A * d - 5 * A) * d + 8 * A) * d - 4 * A;
  return 0.0;
}

// The 4 cubic weights of taps floor(x)-1 .. floor(x)+2 for fraction t.
TWINFER_HD void gs_cubic_coeffs(double t, double* c) {
  c[0] = gs_cubic_kernel(t + 1);
  c[1] = gs_cubic_kernel(t);
  c[2] = gs_cubic_kernel(1 - t);
  c[3] = gs_cubic_kernel(2 - t);
}

// A normalised coordinate v along a dim of length L, in the grid's compute
// type C (the CPU computes in the grid's type; float for 16-bit grids).
template <typename C>
TWINFER_HD C gs_unnormalize(C v, int64_t L, bool align) {
  const C len = static_cast<C>(L);
  return align ? (v + C(1)) / C(2) * (len - C(1)) : ((v + C(1)) * len - C(1)) / C(2);
}

struct GsTaps {
  int n = 0;
  int64_t idx[4] = {0, 0, 0, 0};  // -1: reads zero
  double w[4] = {0, 0, 0, 0};
  bool nan = false;  // the sample is NaN whatever the input (see gs_nan_coordinate)
};

// A NaN unnormalised coordinate x (a NaN in the grid). The ONNX reference has
// no answer (linear and cubic raise converting NaN to an integer; nearest casts
// it to INT32_MIN), and casting NaN to an integer is undefined in C++ (x86
// gives INT64_MIN, CUDA 0: the CPU and CUDA kernels disagreed), so this is
// PyTorch's CUDA grid_sample rule, for every dim and on every backend:
//   nearest, linear: with border or reflection padding NaN clamps to pixel 0
//     (PyTorch's clip_coordinates, fmaxf / fminf); with zeros padding it lies
//     outside the input (PyTorch's safe_downgrade_to_int_range), so the
//     sample is 0;
//   cubic: NaN whatever the padding (its weights come from the NaN fraction).
// (PyTorch's CPU kernels each depart in one case: the vectorised 2-D one gives
// NaN for linear + zeros, the scalar 3-D one clamps NaN to the last pixel.)
// Returns true (and sets *t) when the taps are decided here; else x is the
// coordinate to sample (0 for a NaN under border / reflection).
TWINFER_HD bool gs_nan_coordinate(double* x, GsMode mode, GsPad pad, GsTaps* t) {
  if (*x == *x) return false;  // not NaN
  if (mode == GsMode::kCubic) {
    t->n = 0;
    t->nan = true;
    return true;
  }
  if (pad == GsPad::kZeros) {
    t->n = 1;
    t->idx[0] = -1;
    t->w[0] = 0;
    return true;
  }
  *x = 0.0;
  return false;
}

// Whether a sample whose taps are td[0..2] (one per dim) is NaN whatever it reads.
TWINFER_HD bool gs_is_nan(const GsTaps* td) { return td[0].nan || td[1].nan || td[2].nan; }

// The value of a sample whose taps td[0..2] (one per dim) accumulated to acc.
TWINFER_HD double gs_result(const GsTaps* td, double acc) { return gs_is_nan(td) ? nan("") : acc; }

// A tap index through the padding mode.
TWINFER_HD int64_t gs_pixel(int64_t i, int64_t L, double lo, double hi, GsPad pad) {
  if (i >= 0 && i < L) return i;
  int64_t r;
  switch (pad) {
    case GsPad::kZeros: return -1;
    case GsPad::kBorder: r = i; break;
    default: r = static_cast<int64_t>(gs_reflect(static_cast<double>(i), lo, hi)); break;
  }
  return r < 0 ? 0 : (r > L - 1 ? L - 1 : r);
}

// The taps of unnormalised coordinate x along a dim of length L.
TWINFER_HD GsTaps gs_taps(double x, int64_t L, GsMode mode, GsPad pad, bool align) {
  const double lo = align ? 0.0 : -0.5, hi = align ? static_cast<double>(L - 1) : static_cast<double>(L) - 0.5;
  GsTaps t;
  if (gs_nan_coordinate(&x, mode, pad, &t)) return t;
  if (mode == GsMode::kNearest) x = nearbyint(x);
  if (x < lo || x > hi) {
    if (pad == GsPad::kBorder) {
      const double top = static_cast<double>(L - 1);
      x = x < 0.0 ? 0.0 : (x > top ? top : x);
    } else if (pad == GsPad::kReflection) {
      x = gs_reflect(x, lo, hi);
    }
  }
  if (mode == GsMode::kNearest) {
    t.n = 1;
    t.idx[0] = gs_pixel(static_cast<int64_t>(x), L, lo, hi, pad);
    t.w[0] = 1;
    return t;
  }
  const double f = floor(x);
  const int64_t x0 = static_cast<int64_t>(f);
  const double r = x - f;
  if (mode == GsMode::kLinear) {
    t.n = 2;
    t.idx[0] = gs_pixel(x0, L, lo, hi, pad);
    t.idx[1] = gs_pixel(x0 + 1, L, lo, hi, pad);
    t.w[0] = 1 - r;
    t.w[1] = r;
    return t;
  }
  t.n = 4;
  gs_cubic_coeffs(r, t.w);
  for (int k = 0; k < 4; ++k) t.idx[k] = gs_pixel(x0 - 1 + k, L, lo, hi, pad);
  return t;
}

// AffineGrid's base coordinate of index i along a dim of length len: -1..1,
// pixel centres unless align_corners.
TWINFER_HD double affine_base(int64_t i, int64_t len, bool align) {
  if (align) return len > 1 ? -1.0 + 2.0 * static_cast<double>(i) / static_cast<double>(len - 1) : -1.0;
  return -1.0 + (2.0 * static_cast<double>(i) + 1.0) / static_cast<double>(len);
}

}  // namespace twinfer::vision
