// Unary math ops: Abs, Neg, Sign, Reciprocal, exp/log/trig/hyperbolic,
// Erf, Floor/Ceil/Round, IsNaN/IsInf, Not, BitwiseNot. The arithmetic is in
// functors.h; this file only says which dtypes each op takes.
#include "ops/elementwise/unary_kernel.h"

namespace twinfer::ew {
namespace {

template <typename F, unsigned Types>
using Cheap = UnaryTraits<F, Types, false, kGrainCheap>;
template <typename F>
using FloatMath = UnaryTraits<F, kFloatTypes>;

struct IsInfOp : UnaryTraits<IsInf, kFloatTypes, true, kGrainCheap> {
  static IsInf make(const KernelBuildInfo& i) {
    return {i.node().attr_int("detect_positive", 1) != 0, i.node().attr_int("detect_negative", 1) != 0};
  }
};

}  // namespace

TWINFER_REGISTER_UNARY("Abs", Cheap<Abs, kNumericTypes>);
TWINFER_REGISTER_UNARY("Neg", Cheap<Neg, kSignedTypes>);
TWINFER_REGISTER_UNARY("Sign", Cheap<Sign, kNumericTypes>);
TWINFER_REGISTER_UNARY("Reciprocal", Cheap<Reciprocal, kFloatTypes>);
TWINFER_REGISTER_UNARY("Floor", Cheap<Floor, kFloatTypes>);
TWINFER_REGISTER_UNARY("Ceil", Cheap<Ceil, kFloatTypes>);
TWINFER_REGISTER_UNARY("Round", Cheap<Round, kFloatTypes>);
TWINFER_REGISTER_UNARY("Exp", FloatMath<Exp>);
TWINFER_REGISTER_UNARY("Log", FloatMath<Log>);
TWINFER_REGISTER_UNARY("Sqrt", FloatMath<Sqrt>);
TWINFER_REGISTER_UNARY("Sin", FloatMath<Sin>);
TWINFER_REGISTER_UNARY("Cos", FloatMath<Cos>);
TWINFER_REGISTER_UNARY("Tan", FloatMath<Tan>);
TWINFER_REGISTER_UNARY("Asin", FloatMath<Asin>);
TWINFER_REGISTER_UNARY("Acos", FloatMath<Acos>);
TWINFER_REGISTER_UNARY("Atan", FloatMath<Atan>);
TWINFER_REGISTER_UNARY("Sinh", FloatMath<Sinh>);
TWINFER_REGISTER_UNARY("Cosh", FloatMath<Cosh>);
TWINFER_REGISTER_UNARY("Asinh", FloatMath<Asinh>);
TWINFER_REGISTER_UNARY("Acosh", FloatMath<Acosh>);
TWINFER_REGISTER_UNARY("Atanh", FloatMath<Atanh>);
TWINFER_REGISTER_UNARY("Tanh", FloatMath<Tanh>);
TWINFER_REGISTER_UNARY("Erf", FloatMath<Erf>);
TWINFER_REGISTER_UNARY("IsNaN", UnaryTraits<IsNaN, kFloatTypes, true, kGrainCheap>);
TWINFER_REGISTER_UNARY("IsInf", IsInfOp);
TWINFER_REGISTER_UNARY("Not", Cheap<Not, kBool>);
TWINFER_REGISTER_UNARY("BitwiseNot", Cheap<BitwiseNot, kIntTypes>);

}  // namespace twinfer::ew
