// The activation functions (Sigmoid, Softplus, Softsign, Relu, LeakyRelu,
// Elu, Selu, Celu, ThresholdedRelu, HardSigmoid, HardSwish, Mish, Swish, Gelu,
// Shrink): each one's traits as a named type (with the attribute parsing
// that fills the functor) and TWINFER_ACTIVATION_OPS, the list of (ONNX op,
// traits) a backend registers from (see unary_ops.h). The arithmetic is in
// functors.h. No kernel code here.
#pragma once
#include <string>

#include "ops/elementwise/unary_traits.h"

namespace twinfer::ew {

template <typename F>
using FloatAct = UnaryTraits<F, kFloatTypes>;

using SigmoidOp = FloatAct<Sigmoid>;
using SoftplusOp = FloatAct<Softplus>;
using SoftsignOp = FloatAct<Softsign>;
using ReluOp = UnaryTraits<Relu, kSignedTypes, false, kGrainCheap>;
struct LeakyReluOp : UnaryTraits<LeakyRelu, kFloatTypes, false, kGrainCheap> {
  static LeakyRelu make(const KernelBuildInfo& i) { return {i.node().attr_float("alpha", 0.01f)}; }
};
struct EluOp : FloatAct<Elu> {
  static Elu make(const KernelBuildInfo& i) { return {i.node().attr_float("alpha", 1.0f)}; }
};
struct SeluOp : FloatAct<Selu> {
  static Selu make(const KernelBuildInfo& i) {
    Selu s;
    s.alpha = i.node().attr_float("alpha", s.alpha);
    s.gamma = i.node().attr_float("gamma", s.gamma);
    return s;
  }
};
struct CeluOp : FloatAct<Celu> {
  static Celu make(const KernelBuildInfo& i) { return {i.node().attr_float("alpha", 1.0f)}; }
  static bool check(const KernelBuildInfo& i, std::string* why) {
    if (i.node().attr_float("alpha", 1.0f) != 0.0f) return true;
    if (why) *why = "Celu needs a non-zero alpha";
    return false;
  }
};
struct ThresholdedReluOp : UnaryTraits<ThresholdedRelu, kFloatTypes, false, kGrainCheap> {
  static ThresholdedRelu make(const KernelBuildInfo& i) { return {i.node().attr_float("alpha", 1.0f)}; }
};
struct HardSigmoidOp : UnaryTraits<HardSigmoid, kFloatTypes, false, kGrainCheap> {
  static HardSigmoid make(const KernelBuildInfo& i) {
    return {i.node().attr_float("alpha", 0.2f), i.node().attr_float("beta", 0.5f)};
  }
};
using HardSwishOp = UnaryTraits<HardSwish, kFloatTypes, false, kGrainCheap>;
using MishOp = FloatAct<Mish>;
struct SwishOp : FloatAct<Swish> {
  static Swish make(const KernelBuildInfo& i) { return {i.node().attr_float("alpha", 1.f)}; }
};
struct ShrinkOp : UnaryTraits<Shrink, kNumericTypes, false, kGrainCheap> {
  static Shrink make(const KernelBuildInfo& i) {
    return {i.node().attr_float("bias", 0.0f), i.node().attr_float("lambd", 0.5f)};
  }
};

// Gelu (opset 20): the approximate attribute picks one of two functors when
// the kernel is built, so the per-element loop has no mode branch; GeluOp's
// check() accepts both modes, gelu_tanh() says which one a node wants.
inline bool gelu_check(const KernelBuildInfo& i, std::string* why) {
  std::string a = i.node().attr_string("approximate", "none");
  if (a == "none" || a == "tanh") return true;
  if (why) *why = "Gelu approximate='" + a + "' is not supported (expected 'none' or 'tanh')";
  return false;
}
inline bool gelu_tanh(const KernelBuildInfo& i) { return i.node().attr_string("approximate", "none") == "tanh"; }
struct GeluOp : FloatAct<Gelu> {
  static bool check(const KernelBuildInfo& i, std::string* why) { return gelu_check(i, why); }
};
struct GeluTanhOp : FloatAct<GeluTanh> {};

}  // namespace twinfer::ew

// X(onnx op name, traits type in twinfer::ew), in registration order. Gelu
// is registered on its own (its kernel picks GeluOp or GeluTanhOp).
#define TWINFER_ACTIVATION_OPS(X)                                                                \
  X("Sigmoid", SigmoidOp) X("Softplus", SoftplusOp) X("Softsign", SoftsignOp) X("Relu", ReluOp)  \
  X("LeakyRelu", LeakyReluOp) X("Elu", EluOp) X("Selu", SeluOp) X("Celu", CeluOp)                \
  X("ThresholdedRelu", ThresholdedReluOp) X("HardSigmoid", HardSigmoidOp)                        \
  X("HardSwish", HardSwishOp) X("Mish", MishOp) X("Shrink", ShrinkOp) X("Swish", SwishOp)
