// log and log1p of float32 in straight-line code the compiler vectorises
// (transcendental_fast.cc's Log and Softplus; libm's logf is a call per element).
// x = m 2^e with m in [sqrt(1/2), sqrt(2)), log x = e ln2 + 2 atanh(s),
// s = (m - 1) / (m + 1), |s| <= 0.1716: the odd series to s^13 leaves a
// relative error under 1e-11, below a float's half ulp. Subnormal x is
// scaled by 2^23 first.
#pragma once
#include <cstdint>
#include <cstring>

namespace twinfer::ew {

// 2 atanh(s) for |s| <= 0.1716 (log of (1 + s) / (1 - s)).
inline float log_ratio(float s) {
  const float z = s * s;
  float p = 1.f / 13;
  p = p * z + 1.f / 11;
  p = p * z + 1.f / 9;
  p = p * z + 1.f / 7;
  p = p * z + 1.f / 5;
  p = p * z + 1.f / 3;
  return 2.f * s + 2.f * s * z * p;
}

// log(x) for any float: -inf at 0, NaN below 0 and for NaN, inf at inf.
inline float log_any(float x) {
  const bool tiny = x < 1.17549435e-38f;  // subnormal (or 0, or negative): scaled, then corrected below
  const float xs = tiny ? x * 8388608.f : x;
  int32_t bits;
  std::memcpy(&bits, &xs, sizeof bits);
  int32_t e = ((bits >> 23) & 0xff) - 127;
  int32_t mbits = (bits & 0x007fffff) | 0x3f800000;  // m in [1, 2)
  float m;
  std::memcpy(&m, &mbits, sizeof m);
  const bool high = m > 1.41421356f;
  m = high ? m * 0.5f : m;
  e = high ? e + 1 : e;
  const float ef = static_cast<float>(e) - (tiny ? 23.f : 0.f);
  const float r = ef * 0.693145751953125f + log_ratio((m - 1.f) / (m + 1.f)) + ef * 1.42860682030941723212e-6f;
  const float special = x == 0.f ? -__builtin_inff() : (x == __builtin_inff() ? x : __builtin_nanf(""));
  return (x > 0.f && x < __builtin_inff()) ? r : special;  // NaN fails both tests: NaN
}

// log(1 + u) for u in [0, 1] (Softplus's tail, u = e^-|x|) as
// 2 atanh(u / (2 + u)): 1 + u is never rounded, and s <= 1/3, where the
// series' truncation stays under a quarter ulp. Below 2^-24, u itself (u^2 / 2
// is under its half ulp; halving a subnormal u first would drop a bit).
inline float log1p_unit(float u) { return u < 5.96046448e-8f ? u : log_ratio(u / (2.f + u)); }

}  // namespace twinfer::ew
