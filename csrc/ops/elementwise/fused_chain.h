// A chain of float elementwise ops as one op, com.twinfer::FusedElementwise
// (graph/passes/fuse_elementwise.h builds it in device plans): every output
// element reads its inputs once, runs the chain in float registers and is
// written once, instead of one kernel and one round trip through memory per
// op.
//
// The node's inputs are registers 0..n-1 (each broadcast to the output's
// shape); step k computes register n+k from one or two earlier registers
// with the same functors the single ops use (functors.h, binary_functors.h),
// so a fused chain computes what its ops compute, only without rounding
// 16-bit intermediates. The last step's register is the output. Attributes:
//   ops     strings, one op name per step (ChainOp below, "GeluTanh" for
//           Gelu's tanh approximation)
//   args    ints, two register ids per step (-1: no second operand)
//   params  floats, two per step (alpha/beta, Clip's bounds; 0 when unused)
//
// This header is shared by the CPU kernel and the CUDA one: the program is
// a plain struct and chain_eval() is __host__ __device__.
#pragma once
#include <cstdint>

#include "ops/elementwise/binary_functors.h"
#include "ops/elementwise/functors.h"

namespace twinfer::ew {

constexpr int kChainMaxInputs = 8;
constexpr int kChainMaxSteps = 16;

// Ops whose functor takes no attribute (one operand, then two operands).
#define TWINFER_CHAIN_UNARY(X)                                                                          \
  X(Abs) X(Neg) X(Reciprocal) X(Floor) X(Ceil) X(Round) X(Exp) X(Log) X(Sqrt) X(Sin) X(Cos) X(Tanh) X(Erf) \
  X(Sigmoid) X(Softplus) X(Softsign) X(Relu) X(HardSwish) X(Mish) X(Gelu) X(GeluTanh)
#define TWINFER_CHAIN_BINARY(X) X(Add) X(Sub) X(Mul) X(Div) X(Pow) X(Max) X(Min) X(PRelu)
// Ops with attributes: (name, functor built from the step's params p0, p1).
#define TWINFER_CHAIN_PARAM(X)                                                      \
  X(LeakyRelu, (LeakyRelu{p0})) X(Elu, (Elu{p0})) X(Celu, (Celu{p0}))              \
  X(ThresholdedRelu, (ThresholdedRelu{p0})) X(Selu, (Selu{p0, p1}))                 \
  X(HardSigmoid, (HardSigmoid{p0, p1})) X(Clip, (Clip<float>{p0, p1}))

enum class ChainOp : int32_t {
#define TWINFER_CHAIN_ENUM(n) k##n,
#define TWINFER_CHAIN_ENUM_P(n, f) k##n,
  TWINFER_CHAIN_UNARY(TWINFER_CHAIN_ENUM) TWINFER_CHAIN_BINARY(TWINFER_CHAIN_ENUM)
      TWINFER_CHAIN_PARAM(TWINFER_CHAIN_ENUM_P)
#undef TWINFER_CHAIN_ENUM
#undef TWINFER_CHAIN_ENUM_P
          kCount
};

struct ChainStep {
  ChainOp op = ChainOp::kAdd;
  int32_t a = 0, b = -1;  // operand registers (b < 0 for one-operand ops)
  float p0 = 0.f, p1 = 0.f;
};

// Small enough to pass to a CUDA kernel by value (328 bytes).
struct ChainProgram {
  int32_t num_inputs = 0;
  int32_t num_steps = 0;
  ChainStep steps[kChainMaxSteps];
};

TWINFER_HD float chain_step(const ChainStep& s, float a, float b) {
  const float p0 = s.p0, p1 = s.p1;
  (void)p1;
  switch (s.op) {
#define TWINFER_CHAIN_CASE1(n) \
  case ChainOp::k##n:          \
    return n{}(a);
#define TWINFER_CHAIN_CASE2(n) \
  case ChainOp::k##n:          \
    return n{}(a, b);
#define TWINFER_CHAIN_CASEP(n, f) \
  case ChainOp::k##n:             \
    return f(a);
    TWINFER_CHAIN_UNARY(TWINFER_CHAIN_CASE1)
    TWINFER_CHAIN_BINARY(TWINFER_CHAIN_CASE2)
    TWINFER_CHAIN_PARAM(TWINFER_CHAIN_CASEP)
#undef TWINFER_CHAIN_CASE1
#undef TWINFER_CHAIN_CASE2
#undef TWINFER_CHAIN_CASEP
    default:
      return a;  // unreachable: chain_program() validated every op
  }
}

// Runs the program on one element: r[0..num_inputs) hold the loaded inputs,
// the steps fill the registers after them; returns the output.
TWINFER_HD float chain_eval(const ChainProgram& p, float (&r)[kChainMaxInputs + kChainMaxSteps]) {
  for (int k = 0; k < p.num_steps; ++k) {
    const ChainStep& s = p.steps[k];
    r[p.num_inputs + k] = chain_step(s, r[s.a], s.b >= 0 ? r[s.b] : 0.f);
  }
  return r[p.num_inputs + p.num_steps - 1];
}

// Whether the op takes a second operand.
constexpr bool chain_binary(ChainOp op) {
  return op == ChainOp::kAdd || op == ChainOp::kSub || op == ChainOp::kMul || op == ChainOp::kDiv ||
         op == ChainOp::kPow || op == ChainOp::kMax || op == ChainOp::kMin || op == ChainOp::kPRelu;
}

}  // namespace twinfer::ew
