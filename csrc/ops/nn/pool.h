// MaxPool / AveragePool geometry shared by the CPU loop kernel (pool.cc),
// the CUDA one (backends/cuda/pool.cu)
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
  // x and y stored [N, spatial..., C]: com.twinfer.nhwc (whose shapes say
  // so), or an int8 MaxPool marked channels_last_storage (shapes NCHW).
  bool channels_last = false;
  Window win;                  // pads resolved for x's spatial size
};

// Reads and checks the node against its concrete shapes (throws naming the node).
PoolSpec pool_spec(const KernelBuildInfo& info);

// A MaxPool whose x and y keep their NCHW shapes but lie NHWC in memory
// (graph/passes/int8_channels_last.h puts it on an int8 MaxPool between
// NHWC QConvs): attribute channels_last_storage = 1.
inline bool stored_channels_last(const graph::Node& n) { return n.attr_int("channels_last_storage", 0) != 0; }

}  // namespace twinfer::nn
