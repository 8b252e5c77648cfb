// Cast and CastLike between float32/64, float16, bfloat16, the integer types
// and bool. Conversions are ew::cast_value (scalar.h): float -> int
// truncates toward zero, NaN -> 0, out-of-range values saturate; narrowing
// integer casts wrap; -> bool is x != 0; 16-bit floats round to nearest even.
#include <cstring>

#include "ops/elementwise/binary_kernel.h"

namespace twinfer::ew {
namespace {

DType cast_target(const graph::Node& n) {
  const graph::Attribute& a = n.required_attr("to");
  return dtype_from_onnx(static_cast<int32_t>(a.i));
}

void cast_infer(InferContext& c) {
  DType to = cast_target(c.node());
  c.check(to != DType::kUndefined && to != DType::kString, ErrorKind::kUnsupportedOp,
          "Cast to ONNX type " + std::to_string(c.node().required_attr("to").i) + " is not supported");
  const auto& v = c.input(0);
  if (v.has_shape)
    c.set_output(0, to, v.shape);
  else
    c.set_output_rank_unknown(0, to);
}

void castlike_infer(InferContext& c) {
  const auto& v = c.input(0);
  DType to = c.input_dtype(1);
  if (v.has_shape)
    c.set_output(0, to, v.shape);
  else
    c.set_output_rank_unknown(0, to);
}

bool cast_supports(const KernelBuildInfo& info, std::string* why) {
  if (!check_input_dtype(info, 0, kAllTypes, why)) return false;
  DType to = info.output(0).dtype;
  if (in_typeset(kAllTypes, to)) return true;
  if (why) *why = std::string("Cast to ") + dtype_name(to) + " is not supported";
  return false;
}

class CastKernel final : public Kernel {
 public:
  explicit CastKernel(const KernelBuildInfo& info)
      : from_(info.input_dtype(0)), to_(info.output(0).dtype) {}

  void run(KernelContext& ctx) const override {
    const TensorView& x = ctx.inputs[0];
    const TensorView& y = ctx.outputs[0];
    const int64_t n = x.numel();
    if (from_ == to_) {
      if (x.data != y.data) std::memcpy(y.data, x.data, x.bytes());
      return;
    }
    dispatch_typeset<kAllTypes>(from_, [&](auto tf) {
      using From = typename decltype(tf)::type;
      dispatch_typeset<kAllTypes>(to_, [&](auto tt) {
        using To = typename decltype(tt)::type;
        const From* src = x.as<const From>();
        To* dst = y.as<To>();
        cpu::parallel_for(n, ctx.num_threads, kGrainCheap, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) dst[i] = cast_value<To>(src[i]);
        });
      });
    });
  }

 private:
  DType from_, to_;
};

}  // namespace

TWINFER_REGISTER_SCHEMA("Cast", cast_infer);
TWINFER_REGISTER_KERNEL("Cast", Backend::kCPU, 0, cast_supports, make_kernel<CastKernel>);
TWINFER_REGISTER_SCHEMA("CastLike", castlike_infer);
TWINFER_REGISTER_KERNEL("CastLike", Backend::kCPU, 0, cast_supports, make_kernel<CastKernel>);

}  // namespace twinfer::ew
