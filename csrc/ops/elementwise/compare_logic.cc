// Comparisons (bool out, numpy broadcasting) and the bool logic ops; their
// traits are in compare_ops.h, here the shape rules and CPU kernels.
#include "ops/elementwise/binary_kernel.h"
#include "ops/elementwise/compare_ops.h"

namespace twinfer::ew {

#define TWINFER_EW_REGISTER(op, Traits) TWINFER_REGISTER_BINARY(op, Traits);
TWINFER_COMPARE_OPS(TWINFER_EW_REGISTER)
#undef TWINFER_EW_REGISTER

}  // namespace twinfer::ew
