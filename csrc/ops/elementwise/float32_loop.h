// A unary float32 op as one vectorised loop over the whole tensor (the fast
// paths of erf_fast.cc and logistic_fast.cc), split across the run's threads.
#pragma once
#include <cstdint>
#include <string>

#include "core/parallel.h"
#include "ops/kernel.h"

namespace twinfer::ew {

inline bool float32_input(const KernelBuildInfo& info, std::string* why) {
  if (info.input_dtype(0) != DType::kFloat32) {
    if (why) *why = "fast path: float32 only";
    return false;
  }
  return true;
}

// Gelu in one form ("none": erf, "tanh") on float32.
inline bool float32_gelu(const KernelBuildInfo& info, const std::string& approximate, std::string* why) {
  if (info.node().attr_string("approximate", "none") != approximate) {
    if (why) *why = "fast path: approximate=\"" + approximate + "\" only";
    return false;
  }
  return float32_input(info, why);
}

template <void (*Loop)(const float*, float*, int64_t)>
class Float32LoopKernel final : public Kernel {
 public:
  explicit Float32LoopKernel(const KernelBuildInfo&) {}
  const char* impl_name() const override { return "vectorised float32"; }
  void run(KernelContext& ctx) const override {
    const float* x = ctx.inputs[0].as<const float>();
    float* y = ctx.outputs[0].as<float>();
    parallel_for(ctx.inputs[0].numel(), ctx.num_threads, 8192,
                 [&](int64_t b, int64_t e) { Loop(x + b, y + b, e - b); });
  }
};

// The same with two float attributes, read once at build by Attrs::read
// (a static function of the graph::Node returning {a, b}): Elu's alpha,
// HardSigmoid's alpha and beta.
struct FloatPair {
  float a, b;
};

template <void (*Loop)(const float*, float*, int64_t, float, float), class Attrs>
class Float32AttrLoopKernel final : public Kernel {
 public:
  explicit Float32AttrLoopKernel(const KernelBuildInfo& info) : attrs_(Attrs::read(info.node())) {}
  const char* impl_name() const override { return "vectorised float32"; }
  void run(KernelContext& ctx) const override {
    const float* x = ctx.inputs[0].as<const float>();
    float* y = ctx.outputs[0].as<float>();
    parallel_for(ctx.inputs[0].numel(), ctx.num_threads, 8192,
                 [&](int64_t b, int64_t e) { Loop(x + b, y + b, e - b, attrs_.a, attrs_.b); });
  }

 private:
  FloatPair attrs_;
};

}  // namespace twinfer::ew
