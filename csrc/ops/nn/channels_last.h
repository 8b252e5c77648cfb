// Shapes of the channels-last ops (domain com.twinfer.nhwc, graph/domains.h):
// their activations are [N, spatial..., C]; the specs kernels read (ConvSpec,
// PoolSpec) keep [N, C, spatial...] and say where the channels are.
#pragma once
#include <cstddef>

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

}  // namespace twinfer::nn
