// The determinant of one m x m matrix (row-major doubles, overwritten) by LU
// factorisation with partial pivoting: the CPU's Det (det.cc) and the CUDA
// kernel's (backends/cuda/det.cu) one routine, so both pivot, eliminate and
// round alike.
#pragma once
#include <math.h>

#include <cstdint>

#include "core/half.h"  // TWINFER_HD

namespace twinfer::tensor {

// x - f * y rounded twice, as two operations: nvcc would fuse them into one
// FMA (rounded once) by default, and the CPU's generic x86-64 code cannot,
// so both keep them apart.
TWINFER_HD double minus_product(double x, double f, double y) {
#ifdef __CUDA_ARCH__
  return __dsub_rn(x, __dmul_rn(f, y));
#else
  volatile double p = f * y;  // a separate rounding even where the compiler may contract
  return x - p;
#endif
}

TWINFER_HD double lu_determinant(double* a, int64_t m) {
  double det = 1.0;
  for (int64_t k = 0; k < m && det != 0.0; ++k) {  // a product that underflowed stays 0
    int64_t p = k;
    for (int64_t i = k + 1; i < m; ++i)
      if (fabs(a[i * m + k]) > fabs(a[p * m + k])) p = i;
    if (a[p * m + k] == 0.0) return 0.0;
    if (p != k) {
      for (int64_t j = 0; j < m; ++j) {
        const double t = a[k * m + j];
        a[k * m + j] = a[p * m + j];
        a[p * m + j] = t;
      }
      det = -det;
    }
    const double piv = a[k * m + k];
    det *= piv;
    for (int64_t i = k + 1; i < m; ++i) {
      const double f = a[i * m + k] / piv;
      for (int64_t j = k + 1; j < m; ++j) a[i * m + j] = minus_product(a[i * m + j], f, a[k * m + j]);
    }
  }
  return det;
}

}  // namespace twinfer::tensor
