// Shapes of the channels-last ops (domain com.twinfer.nhwc, graph/domains.h):
// their activations are [N, spatial..., C] and a Conv's weights KRSC
// [M, k..., C/group] (the same move with M in N's place); the specs kernels
// read (ConvSpec, PoolSpec) keep [N, C, spatial...] and say where the
// channels are.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/tensor.h"

namespace twinfer::nn {

// [N, spatial..., C] -> [N, C, spatial...] (rank < 3: unchanged).
template <class S>
S channels_first_shape(const S& s) {
  if (s.size() < 3) return s;
  S r;
  r.push_back(s[0]);
  r.push_back(s.back());
  for (size_t i = 1; i + 1 < s.size(); ++i) r.push_back(s[i]);
  return r;
}

// [N, C, spatial...] -> [N, spatial..., C] (rank < 3: unchanged).
template <class S>
S channels_last_shape(const S& s) {
  if (s.size() < 3) return s;
  S r;
  r.push_back(s[0]);
  for (size_t i = 2; i < s.size(); ++i) r.push_back(s[i]);
  r.push_back(s[1]);
  return r;
}

// The bytes of the same moves: [n, c, s] -> [n, s, c] and back, elements of
// `es` bytes (s: the spatial dims, or a filter's kernel volume for KRSC
// weights). Batched 2-d transposes through tensor::strided_copy.
void copy_to_channels_last(const void* in, void* out, int64_t n, int64_t c, int64_t s, size_t es, int threads = 1);
void copy_to_channels_first(const void* in, void* out, int64_t n, int64_t c, int64_t s, size_t es, int threads = 1);

// A new host tensor: `t` ([N, C, spatial...], rank >= 3) as [N, spatial..., C],
// and back. Weights [M, C/group, k...] become KRSC and back this way.
Tensor to_channels_last(const Tensor& t);
Tensor to_channels_first(const Tensor& t);

}  // namespace twinfer::nn
