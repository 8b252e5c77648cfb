#include "ops/signal/fft.h"

#include <algorithm>
#include <cmath>

namespace twinfer::signal {
namespace {

// Above this prime factor the direct butterfly (O(p^2) per group) loses to
// Bluestein's three power-of-two FFTs of >= 2n points.
constexpr int64_t kMaxDirectRadix = 64;

inline Cpx mul(Cpx a, Cpx b) { return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re}; }
inline Cpx add(Cpx a, Cpx b) { return {a.re + b.re, a.im + b.im}; }
inline Cpx sub(Cpx a, Cpx b) { return {a.re - b.re, a.im - b.im}; }
inline Cpx conj(Cpx a) { return {a.re, -a.im}; }

// exp(sign * i * pi * num / den), num reduced into [0, 2 den) by the caller
// so the angle stays exact for large j^2.
Cpx unit(int sign, double num, double den) {
  const double a = sign * M_PI * num / den;
  return {std::cos(a), std::sin(a)};
}

}  // namespace

FftPlan::FftPlan(int64_t n, bool inverse) : n_(n), inverse_(inverse) {
  const int sign = inverse ? 1 : -1;
  // Factors: 4s first (the cheapest butterfly), then 2, 3, 5, 7, ...; once
  // p^2 exceeds what is left, what is left is prime.
  int64_t rem = n, p = 4, largest = 1;
  while (rem > 1) {
    while (rem % p != 0) {
      p = p == 4 ? 2 : (p == 2 ? 3 : p + 2);
      if (p * p > rem) p = rem;
    }
    rem /= p;
    factors_.push_back(p);
    factors_.push_back(rem);
    largest = std::max(largest, p);
  }
  if (largest <= kMaxDirectRadix) {
    tw_.resize(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) tw_[j] = unit(sign, 2.0 * static_cast<double>(j), static_cast<double>(n));
    scratch_ = static_cast<size_t>(largest);
    return;
  }
  // Bluestein: with c_j = exp(sign i pi j^2 / n), j k = (j^2 + k^2 - (k-j)^2) / 2
  // gives X_k = c_k * sum_j (x_j c_j) conj(c_{k-j}): a convolution.
  int64_t big = 1;
  while (big < 2 * n - 1) big *= 2;
  big_plan_ = std::make_unique<FftPlan>(big, false);
  chirp_.resize(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    const int64_t j2 = (j * j) % (2 * n);  // n < 2^31 in any real graph
    chirp_[j] = unit(sign, static_cast<double>(j2), static_cast<double>(n));
  }
  std::vector<Cpx> b(static_cast<size_t>(big)), scratch(big_plan_->scratch_size() + 1);
  b[0] = conj(chirp_[0]);
  for (int64_t t = 1; t < n; ++t) b[t] = b[big - t] = conj(chirp_[t]);
  conv_.resize(static_cast<size_t>(big));
  big_plan_->run(b.data(), conv_.data(), scratch.data());
  const double inv_big = 1.0 / static_cast<double>(big);
  for (Cpx& v : conv_) v = {v.re * inv_big, v.im * inv_big};
  scratch_ = 2 * static_cast<size_t>(big) + big_plan_->scratch_size();
}

FftPlan::~FftPlan() = default;

void FftPlan::run(const Cpx* in, Cpx* out, Cpx* scratch) const {
  if (big_plan_) return run_bluestein(in, out, scratch);
  if (n_ == 1) {
    out[0] = in[0];
    return;
  }
  work(out, in, 1, factors_.data(), scratch);
}

// KISS FFT's kf_work: the p sub-transforms of every p-th value (each m
// points, written to out[q m .. q m + m)), then the radix-p butterflies that
// combine them.
void FftPlan::work(Cpx* out, const Cpx* in, int64_t fstride, const int64_t* factors, Cpx* scratch) const {
  const int64_t p = factors[0], m = factors[1];
  if (m == 1) {
    for (int64_t q = 0; q < p; ++q) out[q] = in[q * fstride];
  } else {
    for (int64_t q = 0; q < p; ++q) work(out + q * m, in + q * fstride, fstride * p, factors + 2, scratch);
  }
  switch (p) {
    case 2: return butterfly2(out, fstride, m);
    case 4: return butterfly4(out, fstride, m);
    default: return butterfly_any(out, fstride, m, p, scratch);
  }
}

void FftPlan::butterfly2(Cpx* out, int64_t fstride, int64_t m) const {
  Cpx* out2 = out + m;
  for (int64_t u = 0; u < m; ++u) {
    const Cpx t = mul(out2[u], tw_[u * fstride]);
    out2[u] = sub(out[u], t);
    out[u] = add(out[u], t);
  }
}

void FftPlan::butterfly4(Cpx* out, int64_t fstride, int64_t m) const {
  for (int64_t u = 0; u < m; ++u) {
    const Cpx s0 = mul(out[u + m], tw_[u * fstride]);
    const Cpx s1 = mul(out[u + 2 * m], tw_[2 * u * fstride]);
    const Cpx s2 = mul(out[u + 3 * m], tw_[3 * u * fstride]);
    const Cpx s5 = sub(out[u], s1), x0 = add(out[u], s1);
    const Cpx s3 = add(s0, s2), s4 = sub(s0, s2);
    out[u] = add(x0, s3);
    out[u + 2 * m] = sub(x0, s3);
    // s5 -+ i s4 (forward: -i, inverse: +i).
    const Cpx is4 = inverse_ ? Cpx{-s4.im, s4.re} : Cpx{s4.im, -s4.re};
    out[u + m] = add(s5, is4);
    out[u + 3 * m] = sub(s5, is4);
  }
}

void FftPlan::butterfly_any(Cpx* out, int64_t fstride, int64_t m, int64_t p, Cpx* scratch) const {
  for (int64_t u = 0; u < m; ++u) {
    for (int64_t q = 0; q < p; ++q) scratch[q] = out[u + q * m];
    for (int64_t q1 = 0; q1 < p; ++q1) {
      const int64_t k = u + q1 * m;
      Cpx acc = scratch[0];
      int64_t idx = 0;
      for (int64_t q = 1; q < p; ++q) {
        idx += fstride * k;
        if (idx >= n_) idx %= n_;
        acc = add(acc, mul(scratch[q], tw_[idx]));
      }
      out[k] = acc;
    }
  }
}

// X_k = c_k * (a (*) conj(c))_k with a_j = x_j c_j; the circular convolution
// over big points as FFT^-1(FFT(a) FFT(b)), the inverse done as
// conj(FFT(conj(.))) so one forward plan serves both.
void FftPlan::run_bluestein(const Cpx* in, Cpx* out, Cpx* scratch) const {
  const int64_t big = big_plan_->size();
  Cpx* a = scratch;
  Cpx* fa = scratch + big;
  Cpx* inner = scratch + 2 * big;
  for (int64_t j = 0; j < n_; ++j) a[j] = mul(in[j], chirp_[j]);
  std::fill(a + n_, a + big, Cpx{});
  big_plan_->run(a, fa, inner);
  for (int64_t j = 0; j < big; ++j) fa[j] = conj(mul(fa[j], conv_[j]));
  big_plan_->run(fa, a, inner);
  for (int64_t k = 0; k < n_; ++k) out[k] = mul(chirp_[k], conj(a[k]));
}

}  // namespace twinfer::signal
