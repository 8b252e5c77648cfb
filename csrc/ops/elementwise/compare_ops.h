// The comparisons (bool out, numpy broadcasting) and the bool logic ops:
// each one's traits as a named type and TWINFER_COMPARE_OPS, the list of
// (ONNX op, traits) a backend registers from (see unary_ops.h). The
// arithmetic is in binary_functors.h. No kernel code here.
#pragma once
#include "ops/elementwise/binary_traits.h"

namespace twinfer::ew {

template <typename F, unsigned Types>
using Compare = BinaryTraits<F, Types, /*BoolOut=*/true>;

using EqualOp = Compare<Equal, kAllTypes>;
using LessOp = Compare<Less, kNumericTypes>;
using GreaterOp = Compare<Greater, kNumericTypes>;
using LessOrEqualOp = Compare<LessOrEqual, kNumericTypes>;
using GreaterOrEqualOp = Compare<GreaterOrEqual, kNumericTypes>;
using AndOp = Compare<And, kBool>;
using OrOp = Compare<Or, kBool>;
using XorOp = Compare<Xor, kBool>;

}  // namespace twinfer::ew

// X(onnx op name, traits type in twinfer::ew), in registration order.
#define TWINFER_COMPARE_OPS(X)                                                                    \
  X("Equal", EqualOp) X("Less", LessOp) X("Greater", GreaterOp) X("LessOrEqual", LessOrEqualOp)   \
  X("GreaterOrEqual", GreaterOrEqualOp) X("And", AndOp) X("Or", OrOp) X("Xor", XorOp)
