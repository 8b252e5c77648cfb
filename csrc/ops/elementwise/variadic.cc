// Variadic broadcasting reductions over inputs: Max, Min, Sum, Mean.
// out = f(in0, in1), then out = f(out, in_k) for the rest, each step with its
// own broadcast plan into the (final) output shape; Mean divides at the end.
// Traits and dtype rules in variadic_ops.h; here the CPU kernel.
#include "ops/elementwise/binary_kernel.h"
#include "ops/elementwise/unary_kernel.h"
#include "ops/elementwise/variadic_ops.h"

namespace twinfer::ew {
namespace {

struct Identity {
  template <typename T> TWINFER_HD T operator()(T x) const { return x; }
};

template <typename Op>
class VariadicKernel final : public Kernel {
 public:
  explicit VariadicKernel(const KernelBuildInfo& info)
      : dtype_(info.input_dtype(0)), numel_(shape_numel(info.output_shape(0))) {
    for (size_t i = 0; i < info.num_inputs(); ++i)
      if (info.has_input(i)) inputs_.push_back(i);
    if (inputs_.size() == 1) {
      plans_.push_back(plan_for_node(info, {inputs_[0]}));
    } else {
      plans_.push_back(plan_for_node(info, {inputs_[0], inputs_[1]}));
      for (size_t k = 2; k < inputs_.size(); ++k) {
        BroadcastPlan p;
        try {
          p = make_broadcast_plan({info.output_shape(0), info.input_shape(inputs_[k])},
                                  info.output_shape(0));
        } catch (const Error& e) {
          info.fail(ErrorKind::kShape, e.what());
        }
        plans_.push_back(std::move(p));
      }
    }
  }

  // 16-bit floats accumulate in a float32 buffer and round once at the end,
  // so Sum/Mean of many inputs are as exact as one float32 sum.
  size_t scratch_bytes() const override {
    return (dtype_ == DType::kFloat16 || dtype_ == DType::kBFloat16) ? numel_ * sizeof(float) : 0;
  }

  void run(KernelContext& ctx) const override {
    const TensorView& y = ctx.outputs[0];
    const int nt = ctx.num_threads;
    dispatch_typeset<Op::kTypes>(dtype_, [&](auto tag) {
      using S = typename decltype(tag)::type;
      using Acc = compute_t<S>;  // float for 16-bit floats, else S itself
      const S* in0 = ctx.inputs[inputs_[0]].template as<const S>();
      S* out = y.as<S>();
      if (inputs_.size() == 1) {  // broadcast copy of the only input
        broadcast_for_each(plans_[0], nt, kGrainCheap,
                           [&](int64_t o, const std::array<int64_t, 3>& off, int64_t n) {
                             const S* p = in0 + off[0];
                             const int64_t s = plans_[0].inner_stride[0];
                             for (int64_t j = 0; j < n; ++j) out[o + j] = p[j * s];
                           });
        return;
      }
      std::vector<Acc> fallback;  // only when the runtime gave no scratch
      Acc* acc;
      if constexpr (std::is_same<Acc, S>::value) {
        acc = out;
      } else {
        acc = static_cast<Acc*>(ctx.scratch);
        if (!acc) {
          fallback.resize(numel_);
          acc = fallback.data();
        }
      }
      constexpr bool kDivideInLastPass = Op::kMean && std::is_same<Acc, S>::value;
      const double n = static_cast<double>(inputs_.size());
      // acc = a op input k, for k >= 1 (Mean's last one divides too, where acc is the output).
      auto pass = [&](size_t k, const auto* a) {
        const S* bk = ctx.inputs[inputs_[k]].template as<const S>();
        if constexpr (kDivideInLastPass) {
          if (k + 1 == inputs_.size())
            return broadcast_apply2(plans_[k - 1], a, bk, acc, Lift2<Acc, AddThenDivideBy>{{n}}, nt, kGrainCheap);
        }
        broadcast_apply2(plans_[k - 1], a, bk, acc, Lift2<Acc, typename Op::Functor>{}, nt, kGrainCheap);
      };
      pass(1, in0);
      for (size_t k = 2; k < inputs_.size(); ++k) pass(k, static_cast<const Acc*>(acc));
      if constexpr (Op::kMean && !kDivideInLastPass) {
        unary_apply(static_cast<const Acc*>(acc), out, numel_, DivideBy{n}, nt, kGrainCheap);
      } else if constexpr (!Op::kMean && !std::is_same<Acc, S>::value) {
        unary_apply(static_cast<const Acc*>(acc), out, numel_, Identity{}, nt, kGrainCheap);
      }
    });
  }

 private:
  DType dtype_;
  int64_t numel_;
  std::vector<size_t> inputs_;  // present inputs
  std::vector<BroadcastPlan> plans_;
};

}  // namespace

#define TWINFER_REGISTER_VARIADIC(op, ...)                                     \
  TWINFER_REGISTER_SCHEMA(op, infer_broadcast);                                \
  TWINFER_REGISTER_KERNEL(op, Backend::kCPU, 0, (variadic_supports<__VA_ARGS__>), \
                          (make_kernel<VariadicKernel<__VA_ARGS__>>))

#define TWINFER_EW_REGISTER(op, Traits) TWINFER_REGISTER_VARIADIC(op, Traits);
TWINFER_VARIADIC_OPS(TWINFER_EW_REGISTER)
#undef TWINFER_EW_REGISTER

}  // namespace twinfer::ew
