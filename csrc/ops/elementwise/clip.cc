// Clip: min and max are optional scalar inputs (opset 11+), possibly computed
// at run time, so the bounds are read when the kernel runs; before opset 11
// they are float attributes. A missing bound is the type's lowest/highest
// value (-inf/+inf for floats).
#include <limits>
#include <optional>

#include "ops/elementwise/unary_kernel.h"

namespace twinfer::ew {
namespace {

bool clip_supports(const KernelBuildInfo& info, std::string* why) {
  if (!check_input_dtype(info, 0, kNumericTypes, why) || !check_same_dtype(info, {0, 1, 2}, why))
    return false;
  for (size_t i = 1; i <= 2; ++i) {
    if (info.has_input(i) && shape_numel(info.input_shape(i)) != 1) {
      if (why)
        *why = std::string("Clip ") + (i == 1 ? "min" : "max") + " must be a scalar, got shape " +
               shape_str(info.input_shape(i));
      return false;
    }
  }
  return true;
}

class ClipKernel final : public Kernel {
 public:
  explicit ClipKernel(const KernelBuildInfo& info) : dtype_(info.input_dtype(0)) {
    const graph::Node& n = info.node();
    if (n.has_attr("min")) attr_lo_ = n.attr_float("min", 0.f);
    if (n.has_attr("max")) attr_hi_ = n.attr_float("max", 0.f);
  }

  void run(KernelContext& ctx) const override {
    const TensorView& x = ctx.inputs[0];
    const TensorView& y = ctx.outputs[0];
    dispatch_typeset<kNumericTypes>(dtype_, [&](auto tag) {
      using S = typename decltype(tag)::type;
      using C = compute_t<S>;
      Clip<C> f{std::numeric_limits<C>::has_infinity ? -std::numeric_limits<C>::infinity()
                                                     : std::numeric_limits<C>::lowest(),
                std::numeric_limits<C>::has_infinity ? std::numeric_limits<C>::infinity()
                                                     : std::numeric_limits<C>::max()};
      if (attr_lo_) f.lo = static_cast<C>(*attr_lo_);
      if (attr_hi_) f.hi = static_cast<C>(*attr_hi_);
      if (ctx.inputs.size() > 1 && ctx.inputs[1].data) f.lo = load(*ctx.inputs[1].as<const S>());
      if (ctx.inputs.size() > 2 && ctx.inputs[2].data) f.hi = load(*ctx.inputs[2].as<const S>());
      unary_apply(x.as<const S>(), y.as<S>(), x.numel(), f, ctx.num_threads, kGrainCheap);
    });
  }

 private:
  DType dtype_;
  std::optional<float> attr_lo_, attr_hi_;  // opset < 11
};

}  // namespace

TWINFER_REGISTER_SCHEMA("Clip", infer_same_as_input0);
TWINFER_REGISTER_KERNEL("Clip", Backend::kCPU, 0, clip_supports, make_kernel<ClipKernel>);

}  // namespace twinfer::ew
