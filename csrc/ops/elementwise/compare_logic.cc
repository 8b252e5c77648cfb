// Comparisons (bool out, numpy broadcasting) and the bool logic ops.
#include "ops/elementwise/binary_kernel.h"

namespace twinfer::ew {
namespace {
template <typename F, unsigned Types>
using Compare = BinaryTraits<F, Types, /*BoolOut=*/true>;
}  // namespace

TWINFER_REGISTER_BINARY("Equal", Compare<Equal, kAllTypes>);
TWINFER_REGISTER_BINARY("Less", Compare<Less, kNumericTypes>);
TWINFER_REGISTER_BINARY("Greater", Compare<Greater, kNumericTypes>);
TWINFER_REGISTER_BINARY("LessOrEqual", Compare<LessOrEqual, kNumericTypes>);
TWINFER_REGISTER_BINARY("GreaterOrEqual", Compare<GreaterOrEqual, kNumericTypes>);
TWINFER_REGISTER_BINARY("And", Compare<And, kBool>);
TWINFER_REGISTER_BINARY("Or", Compare<Or, kBool>);
TWINFER_REGISTER_BINARY("Xor", Compare<Xor, kBool>);

}  // namespace twinfer::ew
