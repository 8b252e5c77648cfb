// The unary math ops (Abs, Neg, Sign, Reciprocal, exp/log/trig/hyperbolic,
// Erf, Floor/Ceil/Round, IsNaN/IsInf, Not, BitwiseNot): each one's traits
// as a named type, and TWINFER_UNARY_OPS, the list of (ONNX op, traits) a
// backend registers from with one line:
//
//   #define REG(op, Traits) TWINFER_REGISTER_KERNEL(op, Backend::kCUDA, 0, unary_supports<Traits>, ...);
//   TWINFER_UNARY_OPS(REG)
//
// The arithmetic is in functors.h; this header says which dtypes each op
// takes and how attributes become functor fields. No kernel code here.
#pragma once
#include "ops/elementwise/unary_traits.h"

namespace twinfer::ew {

template <typename F, unsigned Types>
using Cheap = UnaryTraits<F, Types, false, kGrainCheap>;
template <typename F>
using FloatMath = UnaryTraits<F, kFloatTypes>;

using AbsOp = Cheap<Abs, kNumericTypes>;
using NegOp = Cheap<Neg, kSignedTypes>;
using SignOp = Cheap<Sign, kNumericTypes>;
using ReciprocalOp = Cheap<Reciprocal, kFloatTypes>;
using FloorOp = Cheap<Floor, kFloatTypes>;
using CeilOp = Cheap<Ceil, kFloatTypes>;
using RoundOp = Cheap<Round, kFloatTypes>;
using ExpOp = FloatMath<Exp>;
using LogOp = FloatMath<Log>;
using SqrtOp = FloatMath<Sqrt>;
using SinOp = FloatMath<Sin>;
using CosOp = FloatMath<Cos>;
using TanOp = FloatMath<Tan>;
using AsinOp = FloatMath<Asin>;
using AcosOp = FloatMath<Acos>;
using AtanOp = FloatMath<Atan>;
using SinhOp = FloatMath<Sinh>;
using CoshOp = FloatMath<Cosh>;
using AsinhOp = FloatMath<Asinh>;
using AcoshOp = FloatMath<Acosh>;
using AtanhOp = FloatMath<Atanh>;
using TanhOp = FloatMath<Tanh>;
using ErfOp = FloatMath<Erf>;
using IsNaNOp = UnaryTraits<IsNaN, kFloatTypes, true, kGrainCheap>;
struct IsInfOp : UnaryTraits<IsInf, kFloatTypes, true, kGrainCheap> {
  static IsInf make(const KernelBuildInfo& i) {
    return {i.node().attr_int("detect_positive", 1) != 0, i.node().attr_int("detect_negative", 1) != 0};
  }
};
using NotOp = Cheap<Not, kBool>;
using BitwiseNotOp = Cheap<BitwiseNot, kIntTypes>;

}  // namespace twinfer::ew

// X(onnx op name, traits type in twinfer::ew), in registration order.
#define TWINFER_UNARY_OPS(X)                                                                      \
  X("Abs", AbsOp) X("Neg", NegOp) X("Sign", SignOp) X("Reciprocal", ReciprocalOp)                 \
  X("Floor", FloorOp) X("Ceil", CeilOp) X("Round", RoundOp) X("Exp", ExpOp) X("Log", LogOp)       \
  X("Sqrt", SqrtOp) X("Sin", SinOp) X("Cos", CosOp) X("Tan", TanOp) X("Asin", AsinOp)             \
  X("Acos", AcosOp) X("Atan", AtanOp) X("Sinh", SinhOp) X("Cosh", CoshOp) X("Asinh", AsinhOp)     \
  X("Acosh", AcoshOp) X("Atanh", AtanhOp) X("Tanh", TanhOp) X("Erf", ErfOp) X("IsNaN", IsNaNOp)   \
  X("IsInf", IsInfOp) X("Not", NotOp) X("BitwiseNot", BitwiseNotOp)
