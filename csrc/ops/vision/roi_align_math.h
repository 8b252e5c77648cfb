// RoiAlign's geometry (bins and sampling grid of one roi) and its bilinear
// samples, shared by the CPU kernel (roi_align.cc) and CUDA's
// (backends/cuda/vision.cu), so the CPU tests exercise the arithmetic the GPU
// runs. No framework headers: nvcc includes it as it is.
#pragma once
#include <math.h>

#include <cstdint>

#include "core/half.h"

namespace twinfer::vision {

struct RoiGeom {
  double sh = 0, sw = 0, bh = 0, bw = 0;  // start and bin size (y, x)
  int64_t gh = 1, gw = 1, count = 1;      // samples per bin (y, x) and their count (>= 1)
};

// Samples per bin along one axis: sampling_ratio, or adaptive ceil(span /
// bins). At most kMaxRoiGrid (a roi of 2^32 pixels asked for as many, and
// the count overflowed); NaN or a non-positive span gives 0 (the caller's
// count of 1 then averages nothing, as before).
constexpr int64_t kMaxRoiGrid = 4096;
TWINFER_HD int64_t roi_grid(double span, int64_t bins, int64_t ratio) {
  if (ratio > 0) return ratio < kMaxRoiGrid ? ratio : kMaxRoiGrid;
  const double n = ceil(span / static_cast<double>(bins));
  if (!(n > 0.0)) return 0;
  return n < static_cast<double>(kMaxRoiGrid) ? static_cast<int64_t>(n) : kMaxRoiGrid;
}

// One roi given as its scaled corners (roi * spatial_scale, in the data's type).
TWINFER_HD RoiGeom roi_geom(double x1, double y1, double x2, double y2, bool half_pixel, int64_t OH, int64_t OW,
                            int64_t ratio) {
  RoiGeom g;
  const double off = half_pixel ? 0.5 : 0.0;
  g.sw = x1 - off;
  g.sh = y1 - off;
  const double ew = x2 - off, eh = y2 - off;
  double rw = ew - g.sw, rh = eh - g.sh;
  if (!half_pixel) {
    rw = rw > 1.0 ? rw : 1.0;
    rh = rh > 1.0 ? rh : 1.0;
  }
  g.bh = rh / static_cast<double>(OH);
  g.bw = rw / static_cast<double>(OW);
  g.gh = roi_grid(rh, OH, ratio);
  g.gw = roi_grid(rw, OW, ratio);
  g.count = g.gh * g.gw > 1 ? g.gh * g.gw : 1;
  return g;
}

// Sample coordinates: y of sample iy in bin row ph, x of sample ix in bin column pw.
TWINFER_HD double roi_sample_y(const RoiGeom& g, int64_t ph, int64_t iy) {
  return g.sh + ph * g.bh + (iy + 0.5) * g.bh / static_cast<double>(g.gh);
}
TWINFER_HD double roi_sample_x(const RoiGeom& g, int64_t pw, int64_t ix) {
  return g.sw + pw * g.bw + (ix + 0.5) * g.bw / static_cast<double>(g.gw);
}

struct RoiSample {
  int64_t pos[4];  // offsets in the H x W map
  double w[4];
};

// The bilinear sample at (yv, xx) of an H x W map: 0 beyond one pixel outside.
TWINFER_HD RoiSample roi_sample(double yv, double xx, int64_t H, int64_t W) {
  if (yv < -1.0 || yv > H || xx < -1.0 || xx > W) return RoiSample{{0, 0, 0, 0}, {0, 0, 0, 0}};
  yv = yv > 0.0 ? yv : 0.0;
  xx = xx > 0.0 ? xx : 0.0;
  int64_t yl = static_cast<int64_t>(yv), xl = static_cast<int64_t>(xx), yh, xh;
  if (yl >= H - 1) {
    yh = yl = H - 1;
    yv = static_cast<double>(yl);
  } else {
    yh = yl + 1;
  }
  if (xl >= W - 1) {
    xh = xl = W - 1;
    xx = static_cast<double>(xl);
  } else {
    xh = xl + 1;
  }
  const double ly = yv - yl, lx = xx - xl, hy = 1 - ly, hx = 1 - lx;
  return RoiSample{{yl * W + xl, yl * W + xh, yh * W + xl, yh * W + xh}, {hy * hx, hy * lx, ly * hx, ly * lx}};
}

}  // namespace twinfer::vision
