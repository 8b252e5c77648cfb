// The per-element rule of NegativeLogLikelihoodLoss and
// SoftmaxCrossEntropyLoss, shared by the CPU kernel (losses.cc) and CUDA's
// (backends/cuda/loss.cu), so the CPU tests exercise the arithmetic the GPU
// runs. No framework headers: nvcc includes it as it is.
//
// The input [N, C, d1..dk] is seen as [N, C, D] (D = d1*...*dk, 1 without
// spatial dims) and the target [N, d1..dk] as N*D elements k = n*D + d; the
// C scores of element k lie D apart from class_offset(k, 0, ...).
// Compute types as the CPU kernel's: the element type for float/double,
// float for float16/bfloat16 (ew::compute_t); a log-probability is rounded
// to the element type before the loss reads it, as the CPU stores log_prob
// first; sums over elements are taken in double.
#pragma once
#include <math.h>

#include <cstdint>

#include "core/half.h"
#include "ops/elementwise/scalar.h"

namespace twinfer::loss {

enum class Reduction { kNone, kSum, kMean };

// Offset in the input of class v of target element k.
TWINFER_HD int64_t class_offset(int64_t k, int64_t v, int64_t C, int64_t D) {
  const int64_t n = k / D, d = k - n * D;
  return (n * C + v) * D + d;
}

enum class Target { kUsed, kIgnored, kOutOfRange };

// A target equal to ignore_index is ignored (before any range check: the
// ignore index may lie outside [0, C)); one outside [0, C) is an error.
TWINFER_HD Target target_kind(int64_t v, int64_t C, bool has_ignore, int64_t ignore) {
  if (has_ignore && v == ignore) return Target::kIgnored;
  return v < 0 || v >= C ? Target::kOutOfRange : Target::kUsed;
}

// log(sum(exp(x))) over the C values of one row, `stride` apart, in the
// compute type: the max first (NaN never replaces it, as std::max(m, NaN)
// keeps m), then the sum of exp(x - max).
template <typename T>
TWINFER_HD ew::compute_t<T> log_sum_exp(const T* x, int64_t C, int64_t stride) {
  using A = ew::compute_t<T>;
  A m = -static_cast<A>(INFINITY);
  for (int64_t c = 0; c < C; ++c) {
    const A v = ew::load(x[c * stride]);
    m = m < v ? v : m;
  }
  A s = 0;
  for (int64_t c = 0; c < C; ++c) s += ew::m_exp(static_cast<A>(ew::load(x[c * stride]) - m));
  return m + ew::m_log(s);
}

// One log-probability in the element type: x - log_sum_exp.
template <typename T>
TWINFER_HD T log_prob(T x, ew::compute_t<T> lse) {
  return ew::store<T>(static_cast<ew::compute_t<T>>(ew::load(x) - lse));
}

// An element's loss: -log_prob[target] * weight[target] (weight 1 without
// weights), in the compute type. Ignored elements contribute 0 and weight 0.
template <typename T>
TWINFER_HD ew::compute_t<T> nll_term(T lp, ew::compute_t<T> w) {
  return -ew::load(lp) * w;
}

// The reduced loss from the sum of the terms and the sum of the weights of
// the elements not ignored: sum, or sum / weights for mean (0 / 0 = NaN when
// every target is ignored, as the ONNX reference).
TWINFER_HD double reduce_loss(double sum, double weights, Reduction r) {
  return r == Reduction::kMean ? sum / weights : sum;
}

}  // namespace twinfer::loss
