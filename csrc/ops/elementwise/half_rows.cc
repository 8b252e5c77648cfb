#include "ops/elementwise/half_rows.h"

#include "core/simd_clones.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#endif

namespace twinfer::ew {

namespace {

// Bit casts as the vectoriser takes them (it refuses a memcpy's).
inline __attribute__((always_inline)) uint32_t bits_of(float f) { return __builtin_bit_cast(uint32_t, f); }
inline __attribute__((always_inline)) float float_of(uint32_t u) { return __builtin_bit_cast(float, u); }

// c ? a : b as mask arithmetic, which the vectoriser takes where it leaves
// nested ternaries as branches.
inline __attribute__((always_inline)) uint32_t pick(bool c, uint32_t a, uint32_t b) {
  const uint32_t m = 0u - static_cast<uint32_t>(c);
  return (a & m) | (b & ~m);
}

// core/half.h's float_to_half with every case computed and the right one
// picked.
inline __attribute__((always_inline)) uint16_t to_half(float f) {
  const uint32_t u = bits_of(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  // Normal results: rebias the exponent and round the dropped 13 bits to even.
  const uint32_t normal = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;
  // Subnormal results (2^-25 <= |f| < 2^-14): the mantissa with its implicit
  // bit shifted right by 126 - e (14 to 24 places), rounded to even.
  const uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = pick(e >= 102u && e <= 112u, 126u - e, 24u);
  const uint32_t r = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  const uint32_t above = rem > half, tie = rem == half;  // integers, not bools: bools do not vectorise here
  const uint32_t sub = r + (above | (tie & r & 1u));
  // A NaN keeps its payload's top bits and is made quiet, as F16C's
  // conversion does (core/half.h's scalar form drops the payload).
  const uint32_t nan_inf = 0x7c00u | pick(a > 0x7f800000u, 0x200u | ((a >> 13) & 0x3ffu), 0u);
  uint32_t h = pick(a < 0x38800000u, sub, normal);
  h = pick(a < 0x33000000u, 0u, h);
  h = pick(a >= 0x477ff000u, 0x7c00u, h);  // rounds to 65520 or more: inf
  h = pick(a >= 0x7f800000u, nan_inf, h);
  return static_cast<uint16_t>(sign | h);
}

// core/half.h's half_to_float: subnormal halves scaled from their integer
// mantissa (exact: m * 2^-24) instead of renormalised in a loop.
inline __attribute__((always_inline)) float to_float(uint16_t h) {
  const uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  const uint32_t normal = sign | ((exp + 112u) << 23) | (mant << 13);
  const uint32_t special = sign | 0x7f800000u | (mant << 13) | pick(mant != 0u, 0x400000u, 0u);  // NaN: quiet
  const float sub = static_cast<float>(mant) * 5.9604644775390625e-8f;  // 2^-24
  const uint32_t subnormal = bits_of(sub) | sign;
  return float_of(pick(exp == 0u, subnormal, pick(exp == 0x1fu, special, normal)));
}

}  // namespace

TWINFER_SIMD_CLONES void floats_to_halves_soft(const float* __restrict x, uint16_t* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = to_half(x[i]);
}

TWINFER_SIMD_CLONES void halves_to_floats_soft(const uint16_t* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = to_float(x[i]);
}

namespace {

#if defined(__GNUC__) && defined(__x86_64__)
// F16C's conversion instructions (vcvtps2ph with round to nearest even,
// vcvtph2ps): the same values, 8 at a time; the tail in software.
__attribute__((target("avx,f16c"))) void floats_to_halves_f16c(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  floats_to_halves_soft(x + i, y + i, n - i);
}

__attribute__((target("avx,f16c"))) void halves_to_floats_f16c(const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
  halves_to_floats_soft(x + i, y + i, n - i);
}

bool has_f16c() {
  static const bool yes = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  return yes;
}
#else
bool has_f16c() { return false; }
void floats_to_halves_f16c(const float* x, uint16_t* y, int64_t n) { floats_to_halves_soft(x, y, n); }
void halves_to_floats_f16c(const uint16_t* x, float* y, int64_t n) { halves_to_floats_soft(x, y, n); }
#endif

}  // namespace

void floats_to_halves(const float* x, uint16_t* y, int64_t n) {
  if (has_f16c()) floats_to_halves_f16c(x, y, n);
  else floats_to_halves_soft(x, y, n);
}

void halves_to_floats(const uint16_t* x, float* y, int64_t n) {
  if (has_f16c()) halves_to_floats_f16c(x, y, n);
  else halves_to_floats_soft(x, y, n);
}

}  // namespace twinfer::ew
