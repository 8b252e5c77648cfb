// TopK's order, shared by the CPU kernel (topk.cc) and CUDA's
// (backends/cuda/topk.cu): does (value a, index ai) come before (b, bi)?
// The better value first (larger, or smaller with largest = 0; NaN counts as
// the largest value, like the reference runtimes), ties by the lower index
// (the spec's rule).
#pragma once
#include <cstdint>

#include "core/half.h"
#include "ops/elementwise/scalar.h"

namespace twinfer::tensor {

template <typename C>
TWINFER_HD bool topk_before(C a, int64_t ai, C b, int64_t bi, bool largest) {
  const bool an = ew::m_isnan(a), bn = ew::m_isnan(b);
  if (an || bn) {
    if (an && bn) return ai < bi;
    return largest ? an : bn;
  }
  if (a != b) return largest ? a > b : a < b;
  return ai < bi;
}

}  // namespace twinfer::tensor
