// MaxPool / AveragePool geometry shared by the CPU loop kernel (pool.cc)
// and the oneDNN one (backends/cpu/onednn_pool.cc).
#pragma once
#include "core/shape.h"
#include "ops/kernel.h"
#include "ops/nn/window.h"

namespace twinfer::nn {

struct PoolSpec {
  bool is_max = true;
  bool want_indices = false;   // MaxPool's optional second output
  bool include_pad = false;    // AveragePool count_include_pad
  Shape x, y;                  // [N, C, spatial...] whatever the layout
  bool channels_last = false;  // com.twinfer.nhwc: x and y stored [N, spatial..., C]
  Window win;                  // pads resolved for x's spatial size
};

// Reads and checks the node against its concrete shapes (throws naming the node).
PoolSpec pool_spec(const KernelBuildInfo& info);

}  // namespace twinfer::nn
