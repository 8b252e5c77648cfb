// ArgMax / ArgMin's rule for one step of a scan along the axis, shared by the
// CPU kernel (argminmax.cc) and CUDA's (backends/cuda/argminmax.cu): does
// value v replace the current best? Ties go to the first index, or the last
// with select_last_index. NaN counts as the extreme (like NumPy): the first
// NaN wins and stays.
#pragma once
#include <type_traits>

#include "core/half.h"

namespace twinfer::reduce {

template <bool kMax, bool kLast, typename C>
TWINFER_HD bool arg_better(C v, C best) {
  if constexpr (std::is_floating_point_v<C>) {
    if (v != v) return best == best;
    if (best != best) return false;
  }
  if constexpr (kMax) return kLast ? v >= best : v > best;
  else return kLast ? v <= best : v < best;
}

}  // namespace twinfer::reduce
