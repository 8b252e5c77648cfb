// A broadcast plan (broadcast.h) as the OffsetCalc (offset_calc.h) a device
// kernel walks: the same coalesced dims, innermost first.
#pragma once
#include "core/error.h"
#include "ops/elementwise/broadcast.h"
#include "ops/elementwise/offset_calc.h"

namespace twinfer::ew {

template <int N>
OffsetCalc<N> offset_calc_for(const BroadcastPlan& p) {
  static_assert(N <= kMaxBroadcastInputs, "more operands than a broadcast plan has");
  OffsetCalc<N> c;
  if (p.total == 0) {  // an empty output (a dim of size 0): nothing is indexed
    c.rank = 1;
    return c;
  }
  c.rank = static_cast<int>(p.outer.size()) + 1;
  TWINFER_CHECK(c.rank <= kMaxOffsetDims, ErrorKind::kUnsupportedOp,
                "broadcast of rank " + std::to_string(c.rank) + " after merging dims (at most " +
                    std::to_string(kMaxOffsetDims) + " on the device)");
  c.sizes[0] = FastDivmod(static_cast<uint64_t>(p.inner > 0 ? p.inner : 1));
  for (int k = 0; k < N; ++k) c.strides[0][k] = p.inner_stride[k];
  for (int d = 1; d < c.rank; ++d) {
    const size_t o = p.outer.size() - static_cast<size_t>(d);  // outer is outermost first
    c.sizes[d] = FastDivmod(static_cast<uint64_t>(p.outer[o]));
    for (int k = 0; k < N; ++k) c.strides[d][k] = p.outer_stride[o][k];
  }
  return c;
}

// Whether a device kernel can walk this plan (at most kMaxOffsetDims dims
// once merged); for supports(), so a node beyond it runs on the CPU.
inline bool offset_calc_fits(const BroadcastPlan& p) {
  return p.total == 0 || static_cast<int>(p.outer.size()) + 1 <= kMaxOffsetDims;
}

}  // namespace twinfer::ew
