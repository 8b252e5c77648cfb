// Compress's geometry, shared by the CPU kernel (select.cc) and CUDA's
// (backends/cuda/nonzero.cu): x as [outer, n, inner] around the axis (n the
// element count of flattened x without one), and the output's shape for k
// selected slices.
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "ops/kernel.h"

namespace twinfer::tensor {

struct CompressGeom {
  Shape x;
  int64_t axis = -1;  // -1: no axis, x flattened
  int64_t outer = 1, n = 0, inner = 1;

  explicit CompressGeom(const KernelBuildInfo& info) : x(info.input_shape(0)) {
    if (!info.node().has_attr("axis")) {
      n = shape_numel(x);
      return;
    }
    axis = info.node().attr_int("axis", 0);
    if (axis < 0) axis += static_cast<int64_t>(x.size());
    for (int64_t d = 0; d < axis; ++d) outer *= x[d];
    for (size_t d = axis + 1; d < x.size(); ++d) inner *= x[d];
    n = x[axis];
  }
  Shape output(int64_t k) const {
    if (axis < 0) return {k};
    Shape y = x;
    y[static_cast<size_t>(axis)] = k;
    return y;
  }
};

}  // namespace twinfer::tensor
