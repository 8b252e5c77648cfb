// Sin, Cos, Atan, Asin and Acos on float32 as loops the compiler vectorises
// (multiversioned, core/simd_clones.h), like transcendental_fast.cc. The
// general kernel calls libm per element, which a survey against onnxruntime
// (one thread, [8, 128, 3072]) measured 3.4x slower for Sin and Cos, 12.6x
// for Atan, 7.7x for Asin and 14.7x for Acos.
//   Sin, Cos  the octant of |x| (j = |x| * 4/pi rounded up to even), |x|
//             less j * pi/4 in double (Cody and Waite's two parts), then
//             sin's or cos's float polynomial on [-pi/4, pi/4] and the
//             octant's sign. For |x| below 8192; larger |x| (and the
//             infinities) go to libm after the block's loop.
//   Atan      |x| folded into [0, tan(pi/8)] by atan(x) = pi/2 + atan(-1/x)
//             above tan(3 pi/8) and pi/4 + atan((x - 1)/(x + 1)) above
//             tan(pi/8), one division either way, then an odd polynomial.
//   Asin, Acos  |x| above 1/2 folded by asin(a) = pi/2 - 2 asin(sqrt((1 - a) / 2)),
//             an odd polynomial, in double (acos from the same parts).
// The polynomials are Cephes' float ones (Moshier). Every result is within 4
// ulp of the float64 function (tests/test_ops_elementwise.py), signed zeros
// kept. float64 and 16-bit types keep the general kernels.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/simd_clones.h"
#include "ops/elementwise/float32_loop.h"

namespace twinfer::ew {
namespace {

constexpr float kReducedLimit = 8192.f;  // |x| whose octant reduction stays exact enough
constexpr int64_t kBlock = 2048;          // elements per loop, then libm for the large ones

inline __attribute__((always_inline)) float with_sign(float v, uint32_t sign) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  b ^= sign;
  std::memcpy(&v, &b, 4);
  return v;
}

inline __attribute__((always_inline)) uint32_t sign_bit(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b & 0x80000000u;
}

// |x| reduced to [-pi/4, pi/4]: the remainder r and the octant j (even).
// In double: pi/4 in two parts, the first of 36 bits so that j * it is
// exact for j < 2^17, so r keeps its relative accuracy next to the zeros of
// sin and cos (r ~ 1e-7 near 3 pi), where a float reduction loses a few ulp.
// Beyond kReducedLimit (and for NaN) j is 0: the caller's libm pass
// replaces those results, and NaN stays NaN.
inline __attribute__((always_inline)) float reduce_octant(float a, int32_t* j) {
  const double ad = a;
  const double q = a < kReducedLimit ? ad * 1.2732395447351628 : 0.0;  // 4/pi
  int32_t k = static_cast<int32_t>(q);
  k += k & 1;
  const double y = static_cast<double>(k);
  *j = k;
  return static_cast<float>((ad - y * 0.7853981633961666) - y * 1.2816720757972595e-12);
}

inline __attribute__((always_inline)) float sin_poly(float r, float z) {
  return r + r * z * ((-1.9515295891e-4f * z + 8.3321608736e-3f) * z - 1.6666654611e-1f);
}

inline __attribute__((always_inline)) float cos_poly(float z) {
  return 1.f - 0.5f * z + z * z * ((2.443315711809948e-5f * z - 1.388731625493765e-3f) * z + 4.166664568298827e-2f);
}

inline __attribute__((always_inline)) float sin_one(float x) {
  int32_t j;
  const float r = reduce_octant(std::fabs(x), &j), z = r * r;
  const float v = (j & 2) ? cos_poly(z) : sin_poly(r, z);
  return with_sign(v, sign_bit(x) ^ ((j & 4) ? 0x80000000u : 0u));
}

inline __attribute__((always_inline)) float cos_one(float x) {
  int32_t j;
  const float r = reduce_octant(std::fabs(x), &j), z = r * r;
  const float v = (j & 2) ? sin_poly(r, z) : cos_poly(z);
  return with_sign(v, ((j & 4) != 0) != ((j & 2) != 0) ? 0x80000000u : 0u);
}

inline __attribute__((always_inline)) float atan_one(float x) {
  const float a = std::fabs(x);
  const bool big = a > 2.414213562373095f, mid = a > 0.4142135623730950f;  // tan(3 pi/8), tan(pi/8)
  const float num = big ? -1.f : (mid ? a - 1.f : a);
  const float den = big ? a : (mid ? a + 1.f : 1.f);
  const float t = num / den, z = t * t;  // |x| = inf: t = -0, the result pi/2
  const float p = (((8.05374449538e-2f * z - 1.38776856032e-1f) * z + 1.99777106478e-1f) * z - 3.33329491539e-1f) *
                      z * t + t;
  const float base = big ? 1.57079632679489661923f : (mid ? 0.78539816339744830962f : 0.f);
  return with_sign(base + p, sign_bit(x));  // NaN: NaN
}

// asin(a) for a = |x| in [0, 1]: below 1/2 the odd polynomial in a, above
// it pi/2 - 2 asin(sqrt((1 - a) / 2)). In double (Cephes' float coefficients
// give float accuracy; float arithmetic around them cost up to 2 ulp more
// near a = 1/2, where pi/2 - 2p loses a bit). Also returns whether a > 1/2
// and the folded argument's asin, which acos reuses.
inline __attribute__((always_inline)) double asin_parts(double a, bool* high, double* p_out) {
  *high = a > 0.5;
  const double z = *high ? 0.5 * (1.0 - a) : a * a;
  const double s = *high ? __builtin_sqrt(z) : a;
  const double p = ((((4.2163199048e-2 * z + 2.4181311049e-2) * z + 4.5470025998e-2) * z + 7.4953002686e-2) * z +
                    1.6666752422e-1) * z * s + s;
  *p_out = p;
  return *high ? 1.5707963267948966 - 2.0 * p : p;
}

inline __attribute__((always_inline)) float asin_one(float x) {
  bool high;
  double p;
  const double r = asin_parts(std::fabs(x), &high, &p);
  return with_sign(static_cast<float>(r), sign_bit(x));  // |x| > 1 and NaN: NaN (sqrt of a negative)
}

// acos(x) = pi/2 - asin(x) where |x| <= 1/2; 2 asin(sqrt((1 - x) / 2)) above,
// pi - 2 asin(sqrt((1 + x) / 2)) below -1/2.
inline __attribute__((always_inline)) float acos_one(float x) {
  bool high;
  double p;
  const double r = asin_parts(std::fabs(x), &high, &p);
  const double low = 1.5707963267948966 - (x < 0.f ? -r : r);
  return static_cast<float>(high ? (x < 0.f ? 3.141592653589793 - 2.0 * p : 2.0 * p) : low);
}

TWINFER_SIMD_CLONES void asin_loop(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = asin_one(x[i]);
}
TWINFER_SIMD_CLONES void acos_loop(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = acos_one(x[i]);
}

TWINFER_SIMD_CLONES void sin_block(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = sin_one(x[i]);
}
TWINFER_SIMD_CLONES void cos_block(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = cos_one(x[i]);
}
TWINFER_SIMD_CLONES void atan_loop(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = atan_one(x[i]);
}

// Blocks of the vector loop, each followed by libm for its |x| >= kReducedLimit
// (a compare per element while the block is in cache; rare in models).
template <void (*Block)(const float*, float*, int64_t), float (*Libm)(float)>
void reduced_loop(const float* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = b + kBlock < n ? b + kBlock : n;
    Block(x + b, y + b, e - b);
    for (int64_t i = b; i < e; ++i)
      if (std::fabs(x[i]) >= kReducedLimit) y[i] = Libm(x[i]);
  }
}

float libm_sin(float v) { return std::sin(v); }
float libm_cos(float v) { return std::cos(v); }

void sin_loop(const float* x, float* y, int64_t n) { reduced_loop<sin_block, libm_sin>(x, y, n); }
void cos_loop(const float* x, float* y, int64_t n) { reduced_loop<cos_block, libm_cos>(x, y, n); }

}  // namespace

TWINFER_REGISTER_KERNEL("Sin", Backend::kCPU, 10, float32_input, make_kernel<Float32LoopKernel<sin_loop>>);
TWINFER_REGISTER_KERNEL("Cos", Backend::kCPU, 10, float32_input, make_kernel<Float32LoopKernel<cos_loop>>);
TWINFER_REGISTER_KERNEL("Atan", Backend::kCPU, 10, float32_input, make_kernel<Float32LoopKernel<atan_loop>>);
TWINFER_REGISTER_KERNEL("Asin", Backend::kCPU, 10, float32_input, make_kernel<Float32LoopKernel<asin_loop>>);
TWINFER_REGISTER_KERNEL("Acos", Backend::kCPU, 10, float32_input, make_kernel<Float32LoopKernel<acos_loop>>);

}  // namespace twinfer::ew
