// float16 / bfloat16 storage types and conversions, usable on host and device.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define TWINFER_HD __host__ __device__ __forceinline__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#else
#define TWINFER_HD inline
#endif

namespace twinfer {

struct half_t { uint16_t bits; };
struct bfloat16_t { uint16_t bits; };

TWINFER_HD float bits_to_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
TWINFER_HD uint32_t float_to_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

// IEEE binary16 -> binary32, exact. On a GPU the conversion instructions
// give the same values (round to nearest even both ways; a NaN stays a NaN,
// its payload bits may differ); the bit manipulation is for the host.
TWINFER_HD float half_to_float(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#else
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      do { ++e; mant <<= 1; } while ((mant & 0x400u) == 0);
      u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  return bits_to_float(u);
#endif
}

// binary32 -> binary16 with round-to-nearest-even, overflow to inf, NaN kept.
TWINFER_HD uint16_t float_to_half(float f) {
#if defined(__CUDA_ARCH__)
  return __half_as_ushort(__float2half_rn(f));
#else
  uint32_t u = float_to_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t absu = u & 0x7fffffffu;
  if (absu >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (absu > 0x7f800000u ? 0x200u : 0));
  if (absu >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (absu < 0x38800000u) {  // result is subnormal or zero
    if (absu < 0x33000000u) return (uint16_t)sign;
    uint32_t e = absu >> 23;
    uint32_t m = (absu & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;  // 14 - (e - 112)
    uint32_t r = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (r & 1))) ++r;
    return (uint16_t)(sign | r);
  }
  uint32_t r = absu + 0xc8000fffu + ((absu >> 13) & 1);  // rebias exponent and round to even
  return (uint16_t)(sign | (r >> 13));
#endif
}

TWINFER_HD float bf16_to_float(uint16_t b) { return bits_to_float((uint32_t)b << 16); }

TWINFER_HD uint16_t float_to_bf16(float f) {
#if defined(__CUDA_ARCH__)
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
#else
  uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
#endif
}

// The same, but a finite float beyond the type's range becomes its largest
// finite value, not infinity: what lowering a model's constants to 16 bits
// wants. Masks are filled with torch.finfo(float32).min; as -inf a fully
// masked softmax row became NaN, and the NaN spread to every token.
TWINFER_HD uint16_t float_to_half_saturate(float f) {
  const uint16_t h = float_to_half(f);
  const bool finite = (float_to_bits(f) & 0x7f800000u) != 0x7f800000u;
  return finite && (h & 0x7fffu) == 0x7c00u ? (uint16_t)((h & 0x8000u) | 0x7bffu) : h;
}

TWINFER_HD uint16_t float_to_bf16_saturate(float f) {
  const uint16_t b = float_to_bf16(f);
  const bool finite = (float_to_bits(f) & 0x7f800000u) != 0x7f800000u;
  return finite && (b & 0x7fffu) == 0x7f80u ? (uint16_t)((b & 0x8000u) | 0x7f7fu) : b;
}

}  // namespace twinfer
