// Per-block statistics shared by the normalisation kernels.
#pragma once
#include <cmath>
#include <cstdint>

namespace twinfer::nn {

// Mean and 1/sqrt(var + eps) of n contiguous values: two passes (no
// cancellation from E[x^2] - E[x]^2), SIMD reductions in T.
template <typename T>
inline void block_stats(const T* x, int64_t n, T eps, T* mean_out, T* inv_out) {
  T s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += x[i];
  const T mean = n > 0 ? s / static_cast<T>(n) : T(0);
  T q = 0;
#pragma omp simd reduction(+ : q)
  for (int64_t i = 0; i < n; ++i) q += (x[i] - mean) * (x[i] - mean);
  const T var = n > 0 ? q / static_cast<T>(n) : T(0);
  *mean_out = mean;
  *inv_out = T(1) / std::sqrt(var + eps);
}

}  // namespace twinfer::nn
