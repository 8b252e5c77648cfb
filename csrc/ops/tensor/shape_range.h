// Which dims Shape returns (opset 15's start/end), for its rule, its kernel
// and the folding of the dims a Gather or Slice picks from it
// (graph/passes/infer_and_fold.cc).
#pragma once
#include <cstdint>
#include <utility>

#include "graph/ir.h"

namespace twinfer::tensor {

// [start, end) of the dims of a rank-`rank` input that Shape node `n`
// returns, clamped as the spec says.
std::pair<int64_t, int64_t> shape_range(const graph::Node& n, int64_t opset, int64_t rank);

}  // namespace twinfer::tensor
