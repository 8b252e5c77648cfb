// CUDA kernels of the variadic broadcasting reductions over inputs (Max,
// Min, Sum, Mean), as the CPU kernel does them (ops/elementwise/variadic.cc):
// acc = f(in0, in1), then acc = f(acc, in_k) for the rest, each step a
// launch with its own broadcast into the output's shape; Mean divides
// at the end. 16-bit floats accumulate in a float32 scratch buffer and round
// once. One input alone is a copy.
#include <type_traits>

#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/kernel_util.h"
#include "ops/elementwise/binary_traits.h"
#include "ops/elementwise/broadcast_offsets.h"
#include "ops/elementwise/variadic_ops.h"

namespace twinfer_gpu {

// acc[i] = f(acc[i], b[off]): the accumulator is read and written in place,
// so it is not __restrict__ (the shared binary kernels' operands are).
template <typename Acc, typename B, typename F>
__global__ void accumulate(int64_t n, bool flat, OffsetCalc<2> calc, Acc* acc, const B* __restrict__ b, F f) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    int64_t off[2] = {i, i};
    if (!flat) calc.get(static_cast<uint64_t>(i), off);
    acc[i] = f(acc[i], b[off[1]]);
  }
}

// out[i] = f(acc[i]), where out may be acc itself (Mean of float32).
template <typename Acc, typename S, typename F>
__global__ void finish(int64_t n, const Acc* acc, S* out, F f) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) out[i] = f(acc[i]);
}

}  // namespace twinfer_gpu

namespace twinfer::ew {
BroadcastPlan plan_for_node(const KernelBuildInfo& info, std::initializer_list<size_t> ins);  // broadcast.cc
}

namespace twinfer::cuda {
namespace {

using namespace twinfer::ew;

struct Step {
  bool flat = false;  // both operands have the output's shape
  OffsetCalc<2> calc;
};

Step step_for(const BroadcastPlan& p, bool flat) { return Step{flat, offset_calc_for<2>(p)}; }

// Storage in, storage out for the last step (Mean's division or the rounding).
template <typename Out, typename F>
struct Lift1 {
  F f;
  template <typename A> TWINFER_HD Out operator()(A a) const { return store<Out>(f(load(a))); }
};
struct Identity {
  template <typename T> TWINFER_HD T operator()(T x) const { return x; }
};

std::vector<size_t> present_inputs(const KernelBuildInfo& info) {
  std::vector<size_t> in;
  for (size_t i = 0; i < info.num_inputs(); ++i)
    if (info.has_input(i)) in.push_back(i);
  return in;
}

template <typename Op>
bool supports(const KernelBuildInfo& info, std::string* why) {
  if (!variadic_supports<Op>(info, why)) return false;
  const std::vector<size_t> in = present_inputs(info);
  if (!check_input_dtype(info, in[0], Op::kTypes & kCudaElementwiseTypes, why)) return false;
  const Shape out = info.output_shape(0);
  if (in.size() == 1) return true;  // a copy
  bool fits = offset_calc_fits(plan_for_node(info, {in[0], in[1]}));
  for (size_t k = 2; k < in.size() && fits; ++k)
    fits = offset_calc_fits(make_broadcast_plan({out, info.input_shape(in[k])}, out));
  if (!fits && why) *why = "a broadcast of more than " + std::to_string(kMaxOffsetDims) + " dims has no CUDA kernel";
  return fits;
}

template <typename Op>
class VariadicKernel final : public Kernel {
 public:
  explicit VariadicKernel(const KernelBuildInfo& info)
      : n_(shape_numel(info.output_shape(0))), inputs_(present_inputs(info)) {
    dtype_ = info.input_dtype(inputs_[0]);
    const Shape out = info.output_shape(0);
    if (inputs_.size() == 1) return;  // a copy (copy_one)
    steps_.push_back(step_for(plan_for_node(info, {inputs_[0], inputs_[1]}),
                              info.input_shape(inputs_[0]) == out && info.input_shape(inputs_[1]) == out));
    for (size_t k = 2; k < inputs_.size(); ++k)
      steps_.push_back(step_for(make_broadcast_plan({out, info.input_shape(inputs_[k])}, out),
                                info.input_shape(inputs_[k]) == out));
  }
  size_t scratch_bytes() const override {
    return inputs_.size() > 1 && (dtype_ == DType::kFloat16 || dtype_ == DType::kBFloat16) ? n_ * sizeof(float) : 0;
  }
  void run(KernelContext& ctx) const override {
    const LaunchConfig lc = elementwise_launch(n_);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    if (inputs_.size() == 1) return copy_one(ctx, s);
    dispatch_typeset<Op::kTypes & kCudaElementwiseTypes>(dtype_, [&](auto tag) {
      using S = typename decltype(tag)::type;
      using Acc = compute_t<S>;
      S* out = ctx.outputs[0].as<S>();
      Acc* acc;
      if constexpr (std::is_same<Acc, S>::value) acc = out;
      else acc = static_cast<Acc*>(ctx.scratch);
      const Lift2<Acc, typename Op::Functor> f{};
      launch(steps_[0], ctx.inputs[inputs_[0]].as<const S>(), ctx.inputs[inputs_[1]].as<const S>(), acc, f, lc, s);
      for (size_t k = 2; k < inputs_.size(); ++k)
        twinfer_gpu::accumulate<<<lc.blocks, lc.threads, 0, s>>>(n_, steps_[k - 1].flat, steps_[k - 1].calc, acc,
                                                                  ctx.inputs[inputs_[k]].as<const S>(), f);
      if constexpr (Op::kMean) {
        const Lift1<S, DivideBy> div{DivideBy{static_cast<double>(inputs_.size())}};
        twinfer_gpu::finish<<<lc.blocks, lc.threads, 0, s>>>(n_, static_cast<const Acc*>(acc), out, div);
      } else if constexpr (!std::is_same<Acc, S>::value) {
        twinfer_gpu::finish<<<lc.blocks, lc.threads, 0, s>>>(n_, static_cast<const Acc*>(acc), out,
                                                              Lift1<S, Identity>{});
      }
    });
    check_launch("variadic elementwise kernel launch");
  }
  const char* impl_name() const override { return "cuda elementwise"; }

 private:
  // One input: the output is that input (same shape), copied.
  void copy_one(KernelContext& ctx, cudaStream_t s) const {
    const TensorView& x = ctx.inputs[inputs_[0]];
    check(cudaMemcpyAsync(ctx.outputs[0].data, x.data, x.bytes(), cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
  }

  template <typename A, typename B, typename O, typename F>
  void launch(const Step& st, const A* a, const B* b, O* y, const F& f, const LaunchConfig& lc,
              cudaStream_t s) const {
    if (st.flat)
      twinfer_gpu::binary_flat<<<twinfer_gpu::flat_grid<A, B, O>(lc), lc.threads, 0, s>>>(n_, a, b, y, f);
    else
      twinfer_gpu::binary_bcast<<<lc.blocks, lc.threads, 0, s>>>(n_, st.calc, a, b, y, f);
  }

  DType dtype_;
  int64_t n_;
  std::vector<size_t> inputs_;  // present inputs
  std::vector<Step> steps_;
};

}  // namespace

#define TWINFER_CUDA_VARIADIC(op, Traits) \
  TWINFER_REGISTER_KERNEL(op, Backend::kCUDA, 0, supports<Traits>, make_kernel<VariadicKernel<Traits>>);
TWINFER_VARIADIC_OPS(TWINFER_CUDA_VARIADIC)
#undef TWINFER_CUDA_VARIADIC

}  // namespace twinfer::cuda
