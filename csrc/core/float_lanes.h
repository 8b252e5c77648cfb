// Eight floats as one GCC vector, for the multiversioned loops
// (core/simd_clones.h): each clone compiles it to its own instructions (one
// ymm register with AVX2, two SSE registers on the baseline). GCC leaves
// scalar eight-lane reductions scalar (a max needs -ffinite-math-only, a sum
// reassociation), so the loops that reduce are written on this type. Files
// that use it build with -Wno-psabi (CMakeLists.txt): it is only passed
// between inlined helpers.
#pragma once
#include <cstring>

namespace twinfer {

typedef float Lanes8 __attribute__((vector_size(32)));

inline __attribute__((always_inline)) Lanes8 load8(const float* x) {
  Lanes8 v;
  std::memcpy(&v, x, sizeof v);
  return v;
}

}  // namespace twinfer
