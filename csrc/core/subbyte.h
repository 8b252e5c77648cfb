// The 4-bit and 2-bit element types (ONNX INT4, UINT4, FLOAT4E2M1, INT2,
// UINT2): unpacking from ONNX's packed layout and value conversions, usable on
// host and device.
//
// Storage: twinfer keeps them unpacked, one byte per element, the value's bit
// pattern in the low 4 (2) bits and zeros above -- the layout ml_dtypes uses
// for its int4/uint4/int2/uint2/float4_e2m1fn arrays, so NumPy arrays pass in
// and out as they are. Decoders mask the byte, so stray high bits are ignored.
//
// Conversions follow ONNX Cast, whose reference is ml_dtypes' astype:
//   integers -> sub-byte ints:  keep the low bits (two's complement wrap),
//                               as every narrowing integer Cast does;
//   floats -> sub-byte ints:    truncate toward zero, then wrap; NaN and
//                               values beyond int32 (undefined in ONNX) give
//                               0, as the reference does on x86;
//   -> FLOAT4E2M1:              round to nearest even, always saturating to
//                               +-6 (the type has no inf/NaN; ONNX's
//                               `saturate` only concerns the 8-bit floats);
//                               NaN gives the bit pattern ml_dtypes gives
//                               (sign-flipped zero: +NaN -> -0, -NaN -> +0).
#pragma once
#include <math.h>

#include <cstdint>

#include "core/float8.h"

namespace twinfer {

// ONNX packing: element i sits in byte i * bits / 8 at bit (i * bits) % 8,
// low bits first. `packed` holds ceil(n * bits / 8) bytes; the padding bits of
// the last byte are ignored.
inline void unpack_subbyte(const uint8_t* packed, int bits, int64_t n, uint8_t* out) {
  const int per = 8 / bits;
  const uint8_t mask = static_cast<uint8_t>((1u << bits) - 1);
  for (int64_t i = 0; i < n; ++i)
    out[i] = static_cast<uint8_t>((packed[i / per] >> ((i % per) * bits)) & mask);
}

// Bytes ONNX needs for n packed elements of `bits` bits.
inline int64_t packed_subbyte_bytes(int64_t n, int bits) { return (n * bits + 7) / 8; }

// Stored byte -> value.
TWINFER_HD int8_t int4_value(uint8_t b) { return static_cast<int8_t>(static_cast<uint8_t>(b << 4)) >> 4; }
TWINFER_HD uint8_t uint4_value(uint8_t b) { return b & 0x0F; }
TWINFER_HD int8_t int2_value(uint8_t b) { return static_cast<int8_t>(static_cast<uint8_t>(b << 6)) >> 6; }
TWINFER_HD uint8_t uint2_value(uint8_t b) { return b & 0x03; }

// FLOAT4E2M1: sign, 2 exponent bits (bias 1), 1 mantissa bit; magnitudes
// 0, 0.5, 1, 1.5, 2, 3, 4, 6. Exact in float.
TWINFER_HD float float4_e2m1_value(uint8_t b) {
  const uint32_t m = b & 0x7u;
  // e = m >> 1, mantissa = m & 1: subnormal (e = 0) is 0.5 * mantissa, else 2^(e-1) * (1 + mantissa/2).
  const float mag = (m >> 1) == 0 ? 0.5f * static_cast<float>(m & 1u)
                                   : static_cast<float>(1u << ((m >> 1) - 1)) * (1.0f + 0.5f * static_cast<float>(m & 1u));
  return (b & 0x8u) ? -mag : mag;
}

// Wraps an integer into the low `bits` bits.
TWINFER_HD uint8_t wrap_subbyte(int64_t v, int bits) {
  return static_cast<uint8_t>(static_cast<uint64_t>(v) & ((1u << bits) - 1));
}

// Float (any precision, as double) -> sub-byte integer pattern (see top).
TWINFER_HD uint8_t float_to_subbyte_int(double x, int bits) {
  if (!(x > -2147483649.0 && x < 2147483648.0)) return 0;  // NaN, beyond int32
  return wrap_subbyte(static_cast<int64_t>(x), bits);  // the cast truncates toward zero
}

// double -> FLOAT4E2M1 bits (see top). The rounding is float8.h's with an
// E2M1 layout; its sign lands in bit 7 and moves to bit 3 here.
TWINFER_HD uint8_t float_to_float4_e2m1(double x) {
  if (x != x) return signbit(x) ? 0x0 : 0x8;
  constexpr Float8Format kE2M1{1, 1, false, false, 0x07, 0x07};
  const uint8_t r = float_to_float8(x, kE2M1, /*saturate=*/true);
  return static_cast<uint8_t>(((r & 0x80u) >> 4) | (r & 0x07u));
}

}  // namespace twinfer
