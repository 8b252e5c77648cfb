// MaxUnpool's shapes when a kernel is built (CPU and CUDA alike): the
// default unpooled shape its indices address and the output's, checked.
#pragma once
#include "ops/kernel.h"
#include "ops/vision/unpool_index.h"

namespace twinfer::vision {

struct UnpoolShapes {
  Shape dflt;  // the default unpooled shape the indices address
  Shape out;   // the output's
};

// Throws (info.fail) when X and I differ in shape, the rank is under 3, or
// the output does not keep X's batch and channels.
UnpoolShapes unpool_shapes(const KernelBuildInfo& info);

}  // namespace twinfer::vision
