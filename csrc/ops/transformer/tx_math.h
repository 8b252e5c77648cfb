// Arithmetic helpers for the transformer ops' math shared by the CPU and CUDA
// kernels (rotary_math.h, causal_conv_math.h): a product that nvcc may not
// fuse into the following add (an FMA rounds once, the CPU build twice), so
// the device gives the CPU's bits.
#pragma once
#include <type_traits>

#include "ops/elementwise/scalar.h"

namespace twinfer::tx {

template <typename C>
TWINFER_HD C mul_rn(C a, C b) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same<C, float>::value) return __fmul_rn(a, b);
  else return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

}  // namespace twinfer::tx
