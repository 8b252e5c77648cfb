// MaxUnpool's shapes when a kernel is built (CPU and CUDA alike): the
// default unpooled shape its indices address and the output's, checked.
#pragma once
#include "ops/kernel.h"
#include "ops/vision/unpool_index.h"

namespace twinfer::vision {

// Throws (info.fail) when X and I differ in shape, the rank is under 3 or
// over kMaxUnpoolRank, or the output does not keep X's batch and channels.
UnpoolGeom unpool_geom(const KernelBuildInfo& info);

inline Shape unpool_default_shape(const UnpoolGeom& g) { return Shape(g.dflt, g.dflt + g.rank); }
inline Shape unpool_output_shape(const UnpoolGeom& g) { return Shape(g.out, g.out + g.rank); }

}  // namespace twinfer::vision
