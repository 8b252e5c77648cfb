// NonMaxSuppression's arithmetic, shared by the CPU kernel (nms.cc) and
// CUDA's (backends/cuda/nms.cu), so both make the same decisions: a box's
// corners, whether a kept box suppresses a candidate, and the order the
// candidates are taken in.
#pragma once
#include <cstdint>

#include "core/half.h"
#include "ops/tensor/topk_order.h"

namespace twinfer::tensor {

// A box as (x_min, y_min, x_max, y_max), in the compute type C.
template <typename C>
struct NmsBox {
  C x0, y0, x1, y1;
};

// center_point_box=0 reads [y1, x1, y2, x2] in any order; 1 reads
// [x_center, y_center, width, height].
template <typename C>
TWINFER_HD NmsBox<C> nms_corners(const C* b, bool center) {
  if (center) {
    const C hw = b[2] / C(2), hh = b[3] / C(2);
    return {b[0] - hw, b[1] - hh, b[0] + hw, b[1] + hh};
  }
  return {b[1] < b[3] ? b[1] : b[3], b[0] < b[2] ? b[0] : b[2], b[1] < b[3] ? b[3] : b[1],
          b[0] < b[2] ? b[2] : b[0]};
}

// IoU(a, b) > thr, with boxes that do not meet (or have no area) never
// suppressing. Needs an overlap in x first: the CPU kernel's index of kept
// boxes by x range relies on it.
template <typename C>
TWINFER_HD bool nms_suppresses(const NmsBox<C>& a, const NmsBox<C>& b, double thr) {
  const C ix0 = a.x0 > b.x0 ? a.x0 : b.x0, ix1 = a.x1 < b.x1 ? a.x1 : b.x1;
  if (ix1 <= ix0) return false;
  const C iy0 = a.y0 > b.y0 ? a.y0 : b.y0, iy1 = a.y1 < b.y1 ? a.y1 : b.y1;
  if (iy1 <= iy0) return false;
  const C inter = (ix1 - ix0) * (iy1 - iy0);
  const C area_a = (a.x1 - a.x0) * (a.y1 - a.y0), area_b = (b.x1 - b.x0) * (b.y1 - b.y0);
  const C uni = area_a + area_b - inter;
  if (inter <= 0 || area_a <= 0 || area_b <= 0 || uni <= 0) return false;
  return static_cast<double>(inter / uni) > thr;
}

// Whether candidate (score a, box ai) is taken before (b, bi): the higher
// score first, equal scores by the lower box index, NaN as the highest
// score (TopK's order with largest=1: a NaN score is kept only where no
// score_threshold is given, and then it goes first).
template <typename C>
TWINFER_HD bool nms_before(C a, int64_t ai, C b, int64_t bi) {
  return topk_before(a, ai, b, bi, true);
}

// Whether a box with this score is a candidate at all.
template <typename C>
TWINFER_HD bool nms_candidate(C score, bool has_threshold, double threshold) {
  return !has_threshold || static_cast<double>(score) > threshold;
}

}  // namespace twinfer::tensor
