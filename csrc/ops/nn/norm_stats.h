// Per-block statistics shared by the normalisation kernels.
#pragma once
#include <cmath>
#include <cstdint>

#include "ops/elementwise/scalar.h"

namespace twinfer::nn {

// Mean and 1/sqrt(var + eps) of n contiguous values: two passes (no
// cancellation from E[x^2] - E[x]^2), SIMD reductions in C, the compute
// type of the storage type T (float for float16 / bfloat16).
template <typename T, typename C = ew::compute_t<T>>
inline void block_stats(const T* x, int64_t n, C eps, C* mean_out, C* inv_out) {
  C s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += ew::load(x[i]);
  const C mean = n > 0 ? s / static_cast<C>(n) : C(0);
  C q = 0;
#pragma omp simd reduction(+ : q)
  for (int64_t i = 0; i < n; ++i) q += (ew::load(x[i]) - mean) * (ew::load(x[i]) - mean);
  const C var = n > 0 ? q / static_cast<C>(n) : C(0);
  *mean_out = mean;
  *inv_out = C(1) / std::sqrt(var + eps);
}

}  // namespace twinfer::nn
