// Which dims a Reduce* node reduces (attribute axes, or the axes input from
// opset 13 / 18; empty axes: everything, or nothing with
// noop_with_empty_axes), for every backend's reduction kernel.
#pragma once
#include <string>
#include <vector>

#include "ops/tensor/tensor_util.h"

namespace twinfer::reduce {

// The opset from which axes are an input.
inline int64_t axes_input_since(const std::string& op) { return op == "ReduceSum" ? 13 : 18; }

// Which dims are reduced; empty when the op is a no-op (empty axes with
// noop_with_empty_axes). Axes that are not constant set *known = false.
template <typename Ctx>
std::vector<char> reduced_dims(const Ctx& c, int64_t rank, bool* noop, bool* known) {
  const std::string& op = c.node().op_type;
  const int64_t since = axes_input_since(op);
  bool present = false;
  std::vector<int64_t> axes = tensor::axes_attr_or_input(c, 1, since, known, &present);
  *noop = false;
  if (!*known) return {};
  if (axes.empty()) {
    *noop = c.opset() >= since && c.node().attr_int("noop_with_empty_axes", 0) != 0;
    return std::vector<char>(rank, *noop ? 0 : 1);
  }
  std::vector<char> red(rank, 0);
  for (int64_t a : tensor::normalize_axes(c, axes, rank)) red[a] = 1;
  return red;
}

}  // namespace twinfer::reduce
