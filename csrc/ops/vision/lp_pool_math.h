// LpPool's window walk and arithmetic, shared by the CPU kernel (lp_pool.cc)
// and CUDA's (backends/cuda/vision.cu), so the CPU tests exercise the
// arithmetic the GPU runs. No framework headers: nvcc includes it as it is.
#pragma once
#include <cstdint>

#include "core/half.h"
#include "ops/elementwise/scalar.h"

namespace twinfer::vision {

// Output index o of a dim (input length in, kernel k, stride s, dilation d,
// pad_begin pb): the first input index inside the input and the number of
// taps inside (padded positions add nothing).
TWINFER_HD void lp_window(int64_t o, int64_t in, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t* first,
                          int64_t* taps) {
  const int64_t start = o * s - pb;
  const int64_t k_lo = start >= 0 ? 0 : (-start + d - 1) / d;
  const int64_t lim = start > in - 1 ? 0 : (in - 1 - start) / d + 1;
  const int64_t k_hi = k < lim ? k : lim;
  *first = start + k_lo * d;
  *taps = k_hi - k_lo > 0 ? k_hi - k_lo : 0;
}

// |v|^p, in the compute type C (p == 1 and p == 2 without pow).
template <typename C>
TWINFER_HD C lp_term(C v, C p, bool p1, bool p2) {
  const C a = ew::m_abs(v);
  return p1 ? a : p2 ? a * a : ew::m_pow(a, p);
}

// sum^(1/p).
template <typename C>
TWINFER_HD C lp_finish(C sum, C inv_p, bool p1, bool p2) {
  return p1 ? sum : p2 ? ew::m_sqrt(sum) : ew::m_pow(sum, inv_p);
}

}  // namespace twinfer::vision
