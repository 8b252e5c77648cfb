// Split's chunk sizes along its axis, for every kernel that runs it (the
// CPU's in concat_split.cc, CUDA's in backends/cuda/movement.cu): from the
// `split` input or attribute, or num_outputs, or equal parts. A missing
// output still takes its share of the axis.
#pragma once
#include <cstdint>
#include <vector>

namespace twinfer {
class KernelBuildInfo;
}

namespace twinfer::tensor {

// The sizes for an axis of length `len`; *known is false (and the result
// empty) when they come from a split input that is not a constant.
std::vector<int64_t> split_chunk_sizes(const KernelBuildInfo& info, int64_t len, bool* known);

}  // namespace twinfer::tensor
