// What both fuzz targets do with what a reader returns: read every byte of
// every constant (borrowed spans included), so AddressSanitizer sees any
// tensor whose bytes do not lie inside the buffer it was read from.
#pragma once
#include <cstdint>

#include "graph/ir.h"

namespace twinfer::fuzz {

inline uint64_t touch_tensor(const Tensor& t) {
  if (!t.defined() || dtype_is_container(t.dtype()) || t.dtype() == DType::kString) return 0;
  const auto* p = static_cast<const uint8_t*>(t.data());
  uint64_t sum = 0;
  for (size_t i = 0; i < t.bytes(); ++i) sum += p[i];
  return sum;
}

inline uint64_t touch_graph(const graph::Graph& g) {
  uint64_t sum = 0;
  for (const auto& v : g.values) sum += touch_tensor(v.constant);
  for (const auto& n : g.nodes)
    for (const auto& [name, a] : n.attrs) {
      sum += touch_tensor(a.t);
      for (const auto& t : a.tensors) sum += touch_tensor(t);
      if (a.g) sum += touch_graph(*a.g);
      for (const auto& sg : a.graphs) sum += touch_graph(*sg);
    }
  return sum;
}

}  // namespace twinfer::fuzz
