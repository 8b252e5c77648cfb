// Unary math ops: Abs, Neg, Sign, Reciprocal, exp/log/trig/hyperbolic,
// Erf, Floor/Ceil/Round, IsNaN/IsInf, Not, BitwiseNot. The arithmetic is in
// functors.h, each op's dtypes and attributes in unary_ops.h; this file
// registers their shape rules and CPU kernels.
#include "ops/elementwise/unary_kernel.h"
#include "ops/elementwise/unary_ops.h"

namespace twinfer::ew {

#define TWINFER_EW_REGISTER(op, Traits) TWINFER_REGISTER_UNARY(op, Traits);
TWINFER_UNARY_OPS(TWINFER_EW_REGISTER)
#undef TWINFER_EW_REGISTER

}  // namespace twinfer::ew
