// HardSigmoid and HardSwish on float32 as multiversioned loops
// (core/simd_clones.h). The general kernel's baseline build runs them four
// wide with compares and blends: HardSigmoid on [8, 128, 3072] took 1.8x
// onnxruntime's time in stop 45's survey (docs/performance.md), where an
// AVX2 loop runs at memory speed, as Relu does. The same values as the
// general kernel's functors (functors.h: clamp_unit, NaN passing through).
#include "core/simd_clones.h"
#include "ops/elementwise/float32_loop.h"
#include "ops/elementwise/functors.h"

namespace twinfer::ew {
namespace {

TWINFER_SIMD_CLONES void hard_sigmoid_loop(const float* __restrict x, float* __restrict y, int64_t n, float alpha,
                                           float beta) {
  for (int64_t i = 0; i < n; ++i) y[i] = clamp_unit(alpha * x[i] + beta);
}

TWINFER_SIMD_CLONES void hard_swish_loop(const float* __restrict x, float* __restrict y, int64_t n) {
  const HardSwish f;
  for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
}

struct HardSigmoidAttrs {
  static FloatPair read(const graph::Node& n) { return {n.attr_float("alpha", 0.2f), n.attr_float("beta", 0.5f)}; }
};

}  // namespace

TWINFER_REGISTER_KERNEL("HardSigmoid", Backend::kCPU, 10, float32_input, make_kernel<Float32AttrLoopKernel<hard_sigmoid_loop, HardSigmoidAttrs>>);
TWINFER_REGISTER_KERNEL("HardSwish", Backend::kCPU, 10, float32_input,
                        make_kernel<Float32LoopKernel<hard_swish_loop>>);

}  // namespace twinfer::ew
