// Softmax / LogSoftmax geometry: the input seen as [outer, len, inner] with
// the reduction over `len`. Opset >= 13: one axis (default -1). Opset < 13:
// the input is flattened to 2-D at `axis` (default 1) and each row of
// prod(shape[axis:]) elements is normalised, i.e. inner = 1.
#pragma once
#include <cstdint>

#include "ops/kernel.h"

namespace twinfer::nn {

struct SoftmaxGeom {
  int64_t outer = 1, len = 1, inner = 1;
  bool log = false;
};

SoftmaxGeom softmax_geom(const KernelBuildInfo& info);

}  // namespace twinfer::nn
