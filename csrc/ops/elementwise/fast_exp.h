// exp and expm1 of nonpositive float32 in straight-line code the compiler
// vectorises (the float32 loops of erf_fast.cc and logistic_fast.cc; libm's
// expf/tanhf are a call per element). y = k ln2 + r, |r| <= ln2 / 2, with
// e^r - 1 = r (1 + r/2 + ... + r^6/7!) (the next term is below 5e-9 of the
// result, a tenth of a float ulp) and 2^k built from its exponent bits.
#pragma once
#include <cstdint>
#include <cstring>

namespace twinfer::ew {

// 2^k for an integer-valued k in [-126, 127].
inline float pow2_int(float k) {
  const int32_t bits = (static_cast<int32_t>(k) + 127) << 23;
  float p;
  std::memcpy(&p, &bits, sizeof p);
  return p;
}

// k = round(y / ln2) (by the 1.5 * 2^23 trick: vectorises, nearbyint may
// not) and r = y - k ln2 (ln2 split hi + lo).
inline float exp_reduce(float y, float* r) {
  const float k = (y * 1.44269504088896341f + 12582912.f) - 12582912.f;
  *r = (y - k * 0.693145751953125f) - k * 1.42860682030941723212e-6f;
  return k;
}

// e^r - 1 for |r| <= ln2 / 2, without the cancellation of (e^r) - 1.
inline float expm1_reduced(float r) {
  float p = 1.f / 5040;
  p = p * r + 1.f / 720;
  p = p * r + 1.f / 120;
  p = p * r + 1.f / 24;
  p = p * r + 1.f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  return p * r;
}

// exp(y) for y in [-87, 0] (2^k stays normal). NaN and anything below are
// taken as -87 (the integer conversion below is undefined for NaN); callers
// select NaN themselves.
inline float exp_nonpositive(float y) {
  y = !(y >= -87.f) ? -87.f : y;
  float r;
  const float k = exp_reduce(y, &r);
  return (1.f + expm1_reduced(r)) * pow2_int(k);
}

// exp(y) for any y <= 0: clamped at -104 (below it the float result is 0),
// 2^k as two factors so that results in the subnormal range keep their bits.
inline float exp_negative(float y) {
  y = !(y >= -104.f) ? -104.f : y;  // NaN as -104: callers select NaN themselves
  float r;
  const float k = exp_reduce(y, &r);
  const float k1 = (k * 0.5f + 12582912.f) - 12582912.f;  // round(k / 2), both halves >= -76
  return (1.f + expm1_reduced(r)) * pow2_int(k1) * pow2_int(k - k1);
}

// exp(y) for any float y: 0 below -104, +inf above 88.72 (float's largest
// result), NaN for NaN; 2^k as two factors (each in [-76, 64]) so that
// subnormal and near-overflow results keep their bits.
inline float exp_any(float y) {
  const float c = !(y >= -104.f) ? -104.f : (y > 88.8f ? 88.8f : y);  // NaN as -104, selected below
  float r;
  const float k = exp_reduce(c, &r);
  const float k1 = (k * 0.5f + 12582912.f) - 12582912.f;
  const float e = (1.f + expm1_reduced(r)) * pow2_int(k1) * pow2_int(k - k1);
  return y > 88.8f ? __builtin_inff() : (y < -104.f ? 0.f : (y != y ? y : e));
}

// exp(y) - 1 for y in [-104, 0], accurate near 0 (tanh of small x).
inline float expm1_negative(float y) {
  y = !(y >= -104.f) ? -104.f : y;  // NaN as -104: callers select NaN themselves
  float r;
  const float k = exp_reduce(y, &r);
  const float m = expm1_reduced(r);
  const float k1 = (k * 0.5f + 12582912.f) - 12582912.f;
  const float far = (1.f + m) * pow2_int(k1) * pow2_int(k - k1) - 1.f;
  return k == 0.f ? m : far;
}

}  // namespace twinfer::ew
