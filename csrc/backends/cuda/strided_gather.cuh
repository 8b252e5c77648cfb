// The strided gather every CUDA copy is made of: out[i] = in[base + src(i)],
// the output walked in order and the input read through an OffsetCalc
// (ops/elementwise/offset_calc.h, the index math the host tests check).
// movement.cu builds its Transpose/Slice/Concat copies on it; rows.cu moves
// a reduction's axes together with it. The OffsetCalc comes from
// ew::offsets_for.
#pragma once
#include <cstdint>

#include "backends/cuda/elementwise_kernels.cuh"
#include "ops/elementwise/offset_calc.h"

namespace twinfer_gpu {

template <typename U>
__global__ void gather_copy(int64_t n, twinfer::ew::OffsetCalc<1> src, int64_t base, const U* __restrict__ in,
                            U* __restrict__ out) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    int64_t o[1];
    src.get(static_cast<uint64_t>(i), o);
    out[i] = in[base + o[0]];
  }
}

}  // namespace twinfer_gpu
