// 8-bit float storage types (ONNX FLOAT8E4M3FN, FLOAT8E4M3FNUZ, FLOAT8E5M2,
// FLOAT8E5M2FNUZ, FLOAT8E8M0) and their conversions, usable on host and device.
//
// Decoding is exact into float. Encoding rounds to nearest even from a double
// (every float, half, bfloat16 and int32 value is exact in a double, so there
// is no double rounding), and handles overflow as ONNX Cast specifies:
//
//   saturate:      +-inf and values whose rounding exceeds the largest finite
//                  value become +-max; NaN stays NaN.
//   not saturate:  E5M2 overflows to +-inf; the other three (no infinity)
//                  give NaN.
//   FNUZ types:    one NaN (0x80), no -0 (-0 encodes as +0).
//
// E8M0 (a bare power-of-two exponent, no sign, 0xFF = NaN) is encoded from a
// float32 with round_mode "up", "down" or "nearest", following the bit rules
// of the ONNX reference (onnx.numpy_helper.to_float8e8m0).
#pragma once
#include <math.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/half.h"

namespace twinfer {

struct float8_e4m3fn_t { uint8_t bits; };
struct float8_e4m3fnuz_t { uint8_t bits; };
struct float8_e5m2_t { uint8_t bits; };
struct float8_e5m2fnuz_t { uint8_t bits; };
struct float8_e8m0_t { uint8_t bits; };

// Layout of the four sign/exponent/mantissa formats.
struct Float8Format {
  int mbits;         // mantissa bits
  int bias;          // exponent bias
  bool fnuz;         // NaN is 0x80, no negative zero, no infinity
  bool has_inf;      // E5M2 only: 0x7C is +inf
  uint8_t max_code;  // largest finite magnitude code
  uint8_t nan_code;  // positive NaN code (FNUZ: 0x80)
};

// The format of each storage type. A function, not a static data member:
// nvcc treats a constexpr static member of class type as a host variable that
// device code may not read.
template <typename T> struct Float8Traits;
template <> struct Float8Traits<float8_e4m3fn_t> {
  static constexpr TWINFER_HD Float8Format fmt() { return {3, 7, false, false, 0x7E, 0x7F}; }
};
template <> struct Float8Traits<float8_e4m3fnuz_t> {
  static constexpr TWINFER_HD Float8Format fmt() { return {3, 8, true, false, 0x7F, 0x80}; }
};
template <> struct Float8Traits<float8_e5m2_t> {
  static constexpr TWINFER_HD Float8Format fmt() { return {2, 15, false, true, 0x7B, 0x7E}; }
};
template <> struct Float8Traits<float8_e5m2fnuz_t> {
  static constexpr TWINFER_HD Float8Format fmt() { return {2, 16, true, false, 0x7F, 0x80}; }
};
template <typename T>
constexpr bool is_float8_v = std::is_same<T, float8_e4m3fn_t>::value || std::is_same<T, float8_e4m3fnuz_t>::value ||
                             std::is_same<T, float8_e5m2_t>::value || std::is_same<T, float8_e5m2fnuz_t>::value;

// Bits -> float, exact.
TWINFER_HD float float8_to_float(uint8_t b, const Float8Format& f) {
  const uint32_t sign = (uint32_t)(b & 0x80u) << 24;
  const uint32_t mag = b & 0x7Fu;
  if (f.fnuz) {
    if (b == 0x80) return bits_to_float(0x7FC00000u);
  } else if (f.has_inf) {
    if ((mag >> f.mbits) == 0x1Fu) return bits_to_float(sign | (mag & 3u ? 0x7FC00000u : 0x7F800000u));
  } else if (mag == 0x7F) {
    return bits_to_float(sign | 0x7FC00000u);
  }
  const uint32_t exp = mag >> f.mbits;
  const uint32_t mant = mag & ((1u << f.mbits) - 1);
  if (exp == 0) {
    // Subnormal: mant * 2^(1 - bias - mbits), exact in float.
    float v = (float)mant * bits_to_float((uint32_t)(127 + 1 - f.bias - f.mbits) << 23);
    return bits_to_float(sign | float_to_bits(v));
  }
  return bits_to_float(sign | ((exp + 127 - f.bias) << 23) | (mant << (23 - f.mbits)));
}

// double -> bits, round to nearest even, overflow per `saturate` (see top).
TWINFER_HD uint8_t float_to_float8(double x, const Float8Format& f, bool saturate) {
  uint64_t xb;
  memcpy(&xb, &x, 8);
  const bool neg = (xb >> 63) != 0;
  const uint8_t sign = neg ? 0x80 : 0;
  const uint8_t nan = f.fnuz ? f.nan_code : (uint8_t)(sign | f.nan_code);
  double a = fabs(x);
  if (a != a) return nan;
  auto overflow = [&]() -> uint8_t {
    if (saturate) return (uint8_t)(sign | f.max_code);
    return f.has_inf ? (uint8_t)(sign | 0x7C) : nan;
  };
  if (a > 1.7976931348623157e308) return overflow();  // inf
  if (a == 0) return f.fnuz ? 0 : sign;
  int e2;
  frexp(a, &e2);  // a = m * 2^e2, m in [0.5, 1)
  const int emin = 1 - f.bias;
  int e = e2 - 1 < emin ? emin : e2 - 1;  // exponent of the leading bit (clamped: subnormals)
  if (e > 64) return overflow();
  const double q = ldexp(a, f.mbits - e);  // units of the last mantissa place; exact
  double r = floor(q);
  const double rem = q - r;
  if (rem > 0.5 || (rem == 0.5 && fmod(r, 2.0) != 0)) r += 1;
  if (r == 0) return f.fnuz ? 0 : sign;
  int ri = (int)r;
  if (ri >= (2 << f.mbits)) {  // rounded up to the next binade
    ri >>= 1;
    ++e;
  }
  const int expfield = ri >= (1 << f.mbits) ? e + f.bias : 0;
  const int mag = (expfield << f.mbits) | (ri & ((1 << f.mbits) - 1));
  if (mag > f.max_code) return overflow();
  return (uint8_t)(sign | mag);
}

// E8M0: 2^(bits - 127); 0xFF is NaN.
TWINFER_HD float e8m0_to_float(uint8_t b) {
  if (b == 0xFF) return bits_to_float(0x7FC00000u);
  if (b == 0) return bits_to_float(0x00400000u);  // 2^-127, a float subnormal
  return bits_to_float((uint32_t)b << 23);
}

enum class E8M0Round : uint8_t { kUp, kDown, kNearest };

// float32 -> E8M0 from the float's exponent bits; the sign is ignored
// (negative inputs are undefined in ONNX).
TWINFER_HD uint8_t float_to_e8m0(float x, E8M0Round mode, bool saturate) {
  const uint32_t u = float_to_bits(x);
  uint32_t exp = (u >> 23) & 0xFFu;
  if (exp == 0xFF) return 0xFF;
  bool up = false;
  if (mode == E8M0Round::kUp) {
    up = (u & 0x7FFFFFu) != 0;
  } else if (mode == E8M0Round::kNearest) {
    const bool g = (u & 0x400000u) != 0, r = (u & 0x200000u) != 0, s = (u & 0x1FFFFFu) != 0;
    up = g && (r || s || exp > 0);
  }
  if (up && !(saturate && exp == 0xFE)) ++exp;
  return (uint8_t)exp;
}

}  // namespace twinfer
