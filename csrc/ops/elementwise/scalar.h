// Scalar building blocks shared by every elementwise functor, usable on the
// host and (later) in CUDA device code: the compute type of each storage type,
// load/store conversions, and float/double overloads of the libm functions.
// No framework headers here, so a .cu file can include it as it is.
#pragma once
#include <math.h>

#include <cstdint>
#include <type_traits>

#include "core/half.h"

namespace twinfer::ew {

// 16-bit floats are stored as half_t/bfloat16_t and computed in float;
// every other type is computed in itself.
template <typename T> struct ComputeOf { using type = T; };
template <> struct ComputeOf<half_t> { using type = float; };
template <> struct ComputeOf<bfloat16_t> { using type = float; };
template <typename T> using compute_t = typename ComputeOf<T>::type;

template <typename T>
constexpr bool is_half_v = std::is_same<T, half_t>::value || std::is_same<T, bfloat16_t>::value;
template <typename T>
constexpr bool is_float_v = std::is_floating_point<T>::value || is_half_v<T>;

template <typename T> TWINFER_HD T load(T x) { return x; }
TWINFER_HD float load(half_t x) { return half_to_float(x.bits); }
TWINFER_HD float load(bfloat16_t x) { return bf16_to_float(x.bits); }

// Compute value -> storage type S (rounding to nearest even for 16-bit floats).
template <typename S, typename C>
TWINFER_HD S store(C v) {
  if constexpr (std::is_same<S, half_t>::value) {
    return half_t{float_to_half(static_cast<float>(v))};
  } else if constexpr (std::is_same<S, bfloat16_t>::value) {
    return bfloat16_t{float_to_bf16(static_cast<float>(v))};
  } else {
    return static_cast<S>(v);
  }
}

// libm by overload: m_exp(float) calls expf, m_exp(double) calls exp. The C
// names exist as __host__ __device__ functions under nvcc as well.
#define TWINFER_EW_MATH1(name, f32, f64)                          \
  TWINFER_HD float name(float x) { return ::f32(x); }             \
  TWINFER_HD double name(double x) { return ::f64(x); }
TWINFER_EW_MATH1(m_abs, fabsf, fabs)
TWINFER_EW_MATH1(m_exp, expf, exp)
TWINFER_EW_MATH1(m_expm1, expm1f, expm1)
TWINFER_EW_MATH1(m_log, logf, log)
TWINFER_EW_MATH1(m_log1p, log1pf, log1p)
TWINFER_EW_MATH1(m_sqrt, sqrtf, sqrt)
TWINFER_EW_MATH1(m_sin, sinf, sin)
TWINFER_EW_MATH1(m_cos, cosf, cos)
TWINFER_EW_MATH1(m_tan, tanf, tan)
TWINFER_EW_MATH1(m_asin, asinf, asin)
TWINFER_EW_MATH1(m_acos, acosf, acos)
TWINFER_EW_MATH1(m_atan, atanf, atan)
TWINFER_EW_MATH1(m_sinh, sinhf, sinh)
TWINFER_EW_MATH1(m_cosh, coshf, cosh)
TWINFER_EW_MATH1(m_tanh, tanhf, tanh)
TWINFER_EW_MATH1(m_asinh, asinhf, asinh)
TWINFER_EW_MATH1(m_acosh, acoshf, acosh)
TWINFER_EW_MATH1(m_atanh, atanhf, atanh)
TWINFER_EW_MATH1(m_erf, erff, erf)
TWINFER_EW_MATH1(m_floor, floorf, floor)
TWINFER_EW_MATH1(m_ceil, ceilf, ceil)
TWINFER_EW_MATH1(m_trunc, truncf, trunc)
// nearbyint rounds in the current mode, which is round-half-to-even unless
// someone changed it; that is ONNX Round's rule.
TWINFER_EW_MATH1(m_round_even, nearbyintf, nearbyint)
#undef TWINFER_EW_MATH1

TWINFER_HD float m_pow(float x, float y) { return ::powf(x, y); }
TWINFER_HD double m_pow(double x, double y) { return ::pow(x, y); }
TWINFER_HD float m_fmod(float x, float y) { return ::fmodf(x, y); }
TWINFER_HD double m_fmod(double x, double y) { return ::fmod(x, y); }

// c ? a : b without a branch: compilers turn a float ?: into a jump when
// both sides are not cheap, and on data whose sign is random (activations)
// the mispredictions cost more than the math (Sigmoid: 3x).
TWINFER_HD float m_select(bool c, float a, float b) {
  uint32_t m = 0u - static_cast<uint32_t>(c);
  return bits_to_float((float_to_bits(a) & m) | (float_to_bits(b) & ~m));
}
TWINFER_HD double m_select(bool c, double a, double b) {
  uint64_t m = uint64_t(0) - static_cast<uint64_t>(c), ua, ub;
  memcpy(&ua, &a, 8);
  memcpy(&ub, &b, 8);
  uint64_t r = (ua & m) | (ub & ~m);
  double d;
  memcpy(&d, &r, 8);
  return d;
}

// NaN/inf tests by arithmetic, valid for any float type on host and device
// (std::isnan is not a device function); integers are never NaN or inf.
template <typename T> TWINFER_HD bool m_isnan(T x) {
  if constexpr (std::is_floating_point<T>::value) return x != x;
  else return false;
}
template <typename T> TWINFER_HD bool m_isinf(T x) {
  if constexpr (std::is_floating_point<T>::value) return x == x && (x - x) != (x - x);
  else return false;
}

}  // namespace twinfer::ew

namespace twinfer::ew {

// Float -> integer conversion that truncates toward zero (C's rule, which is
// what onnxruntime does for in-range values) and is defined everywhere else:
// NaN -> 0, values beyond the range saturate. C++ leaves those cases
// undefined (x86 gives 0x80..0 or wraps), so we pick the sane answer.
// Integer/bool sources convert as static_cast does (modular for narrowing).
template <typename To, typename From>
TWINFER_HD To convert(From v) {
  if constexpr (std::is_same<To, bool>::value) {
    return v != From(0);
  } else if constexpr (std::is_integral<To>::value && std::is_floating_point<From>::value) {
    constexpr int bits = sizeof(To) * 8;
    if (v != v) return To(0);
    if constexpr (std::is_signed<To>::value) {
      const From lim = From(uint64_t(1) << (bits - 1));  // 2^(bits-1), exact in float
      if (v >= lim) return To(~(uint64_t(1) << (bits - 1)));  // max
      if (v <= -lim) return To(uint64_t(1) << (bits - 1));    // min (two's complement)
      return static_cast<To>(v);
    } else {
      if (v <= From(0)) return To(0);
      // 2^bits; for 64 bits 2^64 is formed as 2 * 2^63.
      const From lim = From(2) * From(uint64_t(1) << (bits - 1));
      if (v >= lim) return To(~uint64_t(0));
      return static_cast<To>(v);
    }
  } else {
    return static_cast<To>(v);
  }
}

// Storage -> storage conversion through the compute types (Cast's rule):
// 16-bit floats go through float; double -> half rounds via float like
// onnxruntime does.
template <typename To, typename From>
TWINFER_HD To cast_value(From v) {
  auto c = load(v);
  if constexpr (is_half_v<To>) {
    return store<To>(static_cast<float>(c));
  } else {
    return convert<To>(c);
  }
}

}  // namespace twinfer::ew
