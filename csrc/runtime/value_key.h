// Inputs whose values, not only their shapes, pick a plan (shape inputs and
// steering inputs, graph/passes/shape_inputs.h): what keys plans and graphs
// by those values compares with these.
#pragma once
#include <cstring>
#include <vector>

#include "core/tensor.h"

namespace twinfer {

// Same dtype, shape and bytes (host tensors).
inline bool same_value(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (a.bytes() == 0 || std::memcmp(a.data(), b.data(), a.bytes()) == 0);
}

inline bool same_values(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!same_value(a[i], b[i])) return false;
  return true;
}

}  // namespace twinfer
