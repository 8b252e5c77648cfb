// Unique's order of slices, shared by the CPU kernel (select.cc) and CUDA's
// (backends/cuda/unique.cu): NaN after every number and equal to NaN
// (NumPy's unique, which the ONNX reference uses). A strict weak order, as
// the sorts need: with NaN unordered, a sort merged distinct values and lost
// the NaNs. Slices compare element by element, the first difference decides.
#pragma once
#include <cstdint>

#include "core/half.h"

namespace twinfer::tensor {

template <typename C>
TWINFER_HD bool unique_same(C u, C v) {
  return u == v || (u != u && v != v);
}

template <typename C>
TWINFER_HD bool unique_before(C u, C v) {
  return u != u ? false : (v != v || u < v);
}

// Slice a before slice b, each `m` elements read through load(slice, t).
template <typename C, typename Load>
TWINFER_HD bool unique_slice_less(int64_t a, int64_t b, int64_t m, const Load& load) {
  for (int64_t t = 0; t < m; ++t) {
    const C u = load(a, t), v = load(b, t);
    if (!unique_same(u, v)) return unique_before(u, v);
  }
  return false;
}

}  // namespace twinfer::tensor
