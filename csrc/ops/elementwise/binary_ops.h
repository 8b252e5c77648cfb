// The binary arithmetic ops (Add, Sub, Mul, Div, Mod, Pow, PRelu, BitShift,
// BitwiseAnd/Or/Xor): each one's traits as a named type, the attribute and
// dtype rules of the ops whose kernel depends on an attribute, and
// TWINFER_BINARY_OPS, the list of (ONNX op, traits) of the plain ones, which
// a backend registers from with one line per list (see unary_ops.h).
// The arithmetic is in binary_functors.h. No kernel code here.
#pragma once
#include <string>

#include "ops/elementwise/binary_traits.h"

namespace twinfer::ew {

using AddOp = BinaryTraits<Add, kNumericTypes>;
using SubOp = BinaryTraits<Sub, kNumericTypes>;
using MulOp = BinaryTraits<Mul, kNumericTypes>;
using DivOp = BinaryTraits<Div, kNumericTypes>;
using BitwiseAndOp = BinaryTraits<BitwiseAnd, kIntTypes>;
using BitwiseOrOp = BinaryTraits<BitwiseOr, kIntTypes>;
using BitwiseXorOp = BinaryTraits<BitwiseXor, kIntTypes>;

// ---- Mod: fmod=1 is C's fmod (any numeric type); fmod=0 is the remainder
// with the divisor's sign (numpy.mod), for integers and floats.
using FModOp = BinaryTraits<FMod, kNumericTypes>;
using IntModOp = BinaryTraits<Mod, kNumericTypes>;
inline bool mod_fmod(const KernelBuildInfo& i) { return i.node().attr_int("fmod", 0) != 0; }
inline bool mod_supports(const KernelBuildInfo& info, std::string* why) {
  if (mod_fmod(info)) return binary_supports<FModOp>(info, why);
  return binary_supports<IntModOp>(info, why);
}

// ---- BitShift: direction LEFT/RIGHT, unsigned and (opset 28) signed integers.
using ShlOp = BinaryTraits<BitShiftLeft, kIntTypes>;
using ShrOp = BinaryTraits<BitShiftRight, kIntTypes>;
inline bool bitshift_left(const KernelBuildInfo& info) { return info.node().attr_string("direction", "") == "LEFT"; }
inline bool bitshift_supports(const KernelBuildInfo& info, std::string* why) {
  std::string d = info.node().attr_string("direction", "");
  if (d != "LEFT" && d != "RIGHT") {
    if (why) *why = "BitShift direction must be 'LEFT' or 'RIGHT', got '" + d + "'";
    return false;
  }
  return binary_supports<ShlOp>(info, why);
}

// ---- PRelu: slope broadcasts to X (one direction); output has X's shape.
using PReluOp = BinaryTraits<PRelu, kFloatTypes | kI32 | kI64 | kU32 | kU64>;

// Before opset 7 PRelu named no broadcasting rule, and exporters of the time
// (PyTorch's per-channel PReLU) wrote a [C] slope for an [N, C, ...] input,
// meaning one slope per channel. Such a slope is read as [C, 1, ...]: the
// shape every backend's kernel broadcasts (ew::plan_for_node); the layout and
// fusion passes leave these PRelus alone.
inline bool prelu_slope_per_channel(int64_t opset, const Shape& x, const Shape& slope) {
  return opset < 7 && slope.size() == 1 && slope[0] > 1 && x.size() >= 3 && slope[0] == x[1];
}
inline Shape prelu_slope_shape(int64_t opset, const Shape& x, Shape slope) {
  if (prelu_slope_per_channel(opset, x, slope)) slope.resize(x.size() - 1, 1);
  return slope;
}

// ---- Pow: base T (floats, int32, int64), exponent of any numeric type
// (functors Pow, and Square for a constant exponent of 2).
constexpr unsigned kPowBase = kFloatTypes | kI32 | kI64;
inline bool pow_supports(const KernelBuildInfo& info, std::string* why) {
  return check_input_dtype(info, 0, kPowBase, why) && check_input_dtype(info, 1, kNumericTypes, why);
}

}  // namespace twinfer::ew

// X(onnx op name, traits type in twinfer::ew), in registration order. Mod,
// BitShift, PRelu and Pow are registered on their own (above).
#define TWINFER_BINARY_OPS(X)                                                                 \
  X("Add", AddOp) X("Sub", SubOp) X("Mul", MulOp) X("Div", DivOp) X("BitwiseAnd", BitwiseAndOp) \
  X("BitwiseOr", BitwiseOrOp) X("BitwiseXor", BitwiseXorOp)
