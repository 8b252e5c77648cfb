// RoiAlign's geometry (bins and sampling grid of one roi) and its bilinear
// samples, shared by the CPU kernel (roi_align.cc) and CUDA's
// (backends/cuda/vision.cu), so the CPU tests exercise the arithmetic the GPU
// runs. No framework headers: nvcc includes it as it is. The geometry is in
// R, the data's precision (float for float32/16-bit data, double for
// double), as onnxruntime and the reference compute it: in double, 0.8f * 6 -
// 0.8f * 1 is 4.0000002, whose ceil over 4 bins took 2 samples where float32's
// exact 4.0 takes 1.
#pragma once
#include <math.h>

#include <cstdint>

#include "core/half.h"

namespace twinfer::vision {

template <typename R>
struct RoiGeom {
  R sh = 0, sw = 0, bh = 0, bw = 0;       // start and bin size (y, x)
  int64_t gh = 1, gw = 1, count = 1;      // samples per bin (y, x) and their count (>= 1)
};

// Samples per bin along one axis: sampling_ratio, or adaptive ceil(span /
// bins). At most kMaxRoiGrid (a roi of 2^32 pixels asked for as many, and
// the count overflowed); NaN or a non-positive span gives 0 (the caller's
// count of 1 then averages nothing, as before).
constexpr int64_t kMaxRoiGrid = 4096;
template <typename R>
TWINFER_HD int64_t roi_grid(R span, int64_t bins, int64_t ratio) {
  if (ratio > 0) return ratio < kMaxRoiGrid ? ratio : kMaxRoiGrid;
  const R n = ceil(span / static_cast<R>(bins));
  if (!(n > R(0))) return 0;
  return n < static_cast<R>(kMaxRoiGrid) ? static_cast<int64_t>(n) : kMaxRoiGrid;
}

// One roi given as its scaled corners (roi * spatial_scale, in the data's type).
template <typename R>
TWINFER_HD RoiGeom<R> roi_geom(R x1, R y1, R x2, R y2, bool half_pixel, int64_t OH, int64_t OW, int64_t ratio) {
  RoiGeom<R> g;
  const R off = half_pixel ? R(0.5) : R(0);
  g.sw = x1 - off;
  g.sh = y1 - off;
  const R ew = x2 - off, eh = y2 - off;
  R rw = ew - g.sw, rh = eh - g.sh;
  if (!half_pixel) {
    rw = rw > R(1) ? rw : R(1);
    rh = rh > R(1) ? rh : R(1);
  }
  g.bh = rh / static_cast<R>(OH);
  g.bw = rw / static_cast<R>(OW);
  g.gh = roi_grid(rh, OH, ratio);
  g.gw = roi_grid(rw, OW, ratio);
  g.count = g.gh * g.gw > 1 ? g.gh * g.gw : 1;
  return g;
}

// Sample coordinates: y of sample iy in bin row ph, x of sample ix in bin column pw.
template <typename R>
TWINFER_HD R roi_sample_y(const RoiGeom<R>& g, int64_t ph, int64_t iy) {
  return g.sh + static_cast<R>(ph) * g.bh + (static_cast<R>(iy) + R(0.5)) * g.bh / static_cast<R>(g.gh);
}
template <typename R>
TWINFER_HD R roi_sample_x(const RoiGeom<R>& g, int64_t pw, int64_t ix) {
  return g.sw + static_cast<R>(pw) * g.bw + (static_cast<R>(ix) + R(0.5)) * g.bw / static_cast<R>(g.gw);
}

template <typename R>
struct RoiSample {
  int64_t pos[4];  // offsets in the H x W map
  R w[4];
};

// The bilinear sample at (yv, xx) of an H x W map: 0 beyond one pixel outside.
template <typename R>
TWINFER_HD RoiSample<R> roi_sample(R yv, R xx, int64_t H, int64_t W) {
  if (yv < R(-1) || yv > static_cast<R>(H) || xx < R(-1) || xx > static_cast<R>(W))
    return RoiSample<R>{{0, 0, 0, 0}, {0, 0, 0, 0}};
  yv = yv > R(0) ? yv : R(0);
  xx = xx > R(0) ? xx : R(0);
  int64_t yl = static_cast<int64_t>(yv), xl = static_cast<int64_t>(xx), yh, xh;
  if (yl >= H - 1) {
    yh = yl = H - 1;
    yv = static_cast<R>(yl);
  } else {
    yh = yl + 1;
  }
  if (xl >= W - 1) {
    xh = xl = W - 1;
    xx = static_cast<R>(xl);
  } else {
    xh = xl + 1;
  }
  const R ly = yv - static_cast<R>(yl), lx = xx - static_cast<R>(xl), hy = R(1) - ly, hx = R(1) - lx;
  return RoiSample<R>{{yl * W + xl, yl * W + xh, yh * W + xl, yh * W + xh}, {hy * hx, hy * lx, ly * hx, ly * lx}};
}

}  // namespace twinfer::vision
