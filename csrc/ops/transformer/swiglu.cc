// SwiGLU (opset 28): y = Swish_alpha(A) * B with A and B of one shape (no
// broadcasting), in float for 16-bit inputs, a threaded elementwise loop.
// Swish itself is an activation (ops/elementwise/activation_ops.h).
#include "ops/elementwise/unary_kernel.h"
#include "ops/transformer/tx_common.h"

namespace twinfer::tx {
namespace {

void infer_swiglu(InferContext& c) {
  const DType dt = c.input_dtype(0);
  if (!(ew::in_typeset(ew::kFloatTypes, dt)))
    c.fail(ErrorKind::kDType, std::string("SwiGLU needs a float input, got ") + dtype_name(dt));
  if (!(c.num_inputs() == 2 && c.has_input(1))) c.fail(ErrorKind::kModelFormat, "SwiGLU takes 2 inputs");
  check_same_dtype_as(c, 1, dt);
  if (c.input_has_shape(0) && c.input_has_shape(1)) {
    const SymShape& a = c.input_shape(0);
    const SymShape& b = c.input_shape(1);
    bool ok = a.size() == b.size();
    for (size_t i = 0; ok && i < a.size(); ++i) ok = dims_compatible(a[i], b[i]);
    if (!(ok))
      c.fail(ErrorKind::kShape,
             "SwiGLU inputs must have one shape, got " + sym_shape_str(a) + " and " + sym_shape_str(b));
    SymShape y = a;
    for (size_t i = 0; i < y.size(); ++i)
      if (!y[i].known()) y[i] = b[i];
    c.set_output(0, dt, y);
    return;
  }
  infer_same_as_input0(c);
}

TWINFER_REGISTER_SCHEMA("SwiGLU", infer_swiglu);

class SwiGLUKernel final : public Kernel {
 public:
  explicit SwiGLUKernel(const KernelBuildInfo& info) : alpha_(info.node().attr_float("alpha", 1.f)) {
    if (info.input_shape(0) != info.input_shape(1))
      info.fail(ErrorKind::kShape, "SwiGLU inputs must have one shape, got " + shape_str(info.input_shape(0)) +
                                       " and " + shape_str(info.input_shape(1)));
  }
  const char* impl_name() const override { return "cpu loop"; }

  void run(KernelContext& ctx) const override {
    dispatch_any_float(ctx.inputs[0].dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = compute_t<T>;
      const T* a = ctx.inputs[0].as<T>();
      const T* b = ctx.inputs[1].as<T>();
      T* y = ctx.outputs[0].as<T>();
      const ew::Swish f{alpha_};
      parallel_for(ctx.outputs[0].numel(), ctx.num_threads, ew::kGrainExpensive, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) y[i] = store<T>(f(static_cast<C>(load(a[i]))) * load(b[i]));
      });
    });
  }

 private:
  float alpha_;
};

bool swiglu_supports(const KernelBuildInfo& info, std::string* why) { return float_inputs(info, {1}, why); }

}  // namespace

TWINFER_REGISTER_KERNEL("SwiGLU", Backend::kCPU, 0, swiglu_supports, make_kernel<SwiGLUKernel>);

}  // namespace twinfer::tx
