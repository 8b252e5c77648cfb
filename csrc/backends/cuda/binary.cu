// CUDA kernels of the binary elementwise ops (arithmetic, comparisons,
// logic, bitwise, Mod, BitShift, PRelu, Pow) and Where: the shared functors
// (ops/elementwise/binary_functors.h) with numpy broadcasting through the
// host-planned OffsetCalc; same-shape operands take the flat kernel.
#include <type_traits>

#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/kernel_util.h"
#include "ops/elementwise/binary_ops.h"
#include "ops/elementwise/broadcast_offsets.h"
#include "ops/elementwise/compare_ops.h"

namespace twinfer::ew {
BroadcastPlan plan_for_node(const KernelBuildInfo& info, std::initializer_list<size_t> ins);  // broadcast.cc
}

namespace twinfer::cuda {
namespace {

using namespace twinfer::ew;

// The operands' geometry, planned once when the kernel is built.
struct Geometry {
  int64_t n = 0;
  bool flat = false;  // every operand has the output's shape
  OffsetCalc<3> calc;

  Geometry(const KernelBuildInfo& info, std::initializer_list<size_t> ins) {
    const Shape out = info.output_shape(0);
    n = shape_numel(out);
    flat = true;
    for (size_t i : ins) flat = flat && info.input_shape(i) == out;
    calc = offset_calc_for<3>(plan_for_node(info, ins));
  }
  OffsetCalc<2> calc2() const {
    OffsetCalc<2> c;
    c.rank = calc.rank;
    for (int d = 0; d < calc.rank; ++d) {
      c.sizes[d] = calc.sizes[d];
      c.strides[d][0] = calc.strides[d][0];
      c.strides[d][1] = calc.strides[d][1];
    }
    return c;
  }
};

template <typename O, typename A, typename B, typename F>
void launch2(const Geometry& g, const A* a, const B* b, O* y, const F& f, cudaStream_t s) {
  const LaunchConfig lc = elementwise_launch(g.n);
  if (!lc.blocks) return;
  if (g.flat) twinfer_gpu::binary_flat<<<twinfer_gpu::flat_grid<A, B, O>(lc), lc.threads, 0, s>>>(g.n, a, b, y, f);
  else twinfer_gpu::binary_bcast<<<lc.blocks, lc.threads, 0, s>>>(g.n, g.calc2(), a, b, y, f);
  check_launch("elementwise kernel launch");
}

// The broadcast fits the kernel's index math (at most kMaxOffsetDims dims
// once merged); beyond, the node runs on the CPU.
bool broadcast_fits(const KernelBuildInfo& info, std::initializer_list<size_t> ins, std::string* why) {
  if (offset_calc_fits(plan_for_node(info, ins))) return true;
  if (why) *why = "a broadcast of more than " + std::to_string(kMaxOffsetDims) + " dims has no CUDA kernel";
  return false;
}

template <typename Op>
bool supports(const KernelBuildInfo& info, std::string* why) {
  return binary_supports<Op>(info, why) && check_input_dtype(info, 0, Op::kTypes & kCudaElementwiseTypes, why) &&
         broadcast_fits(info, {0, 1}, why);
}

template <typename Op>
class BinaryKernel final : public Kernel {
 public:
  explicit BinaryKernel(const KernelBuildInfo& info)
      : f_(Op::make(info)), dtype_(info.input_dtype(0)), geo_(info, {0, 1}) {}
  void run(KernelContext& ctx) const override {
    const cudaStream_t s = stream_of(ctx);
    dispatch_typeset<Op::kTypes & kCudaElementwiseTypes>(dtype_, [&](auto tag) {
      using S = typename decltype(tag)::type;
      using O = std::conditional_t<Op::kBoolOut, bool, S>;
      launch2(geo_, ctx.inputs[0].as<const S>(), ctx.inputs[1].as<const S>(), ctx.outputs[0].as<O>(),
              Lift2<O, typename Op::Functor>{f_}, s);
    });
  }
  const char* impl_name() const override { return "cuda elementwise"; }

 private:
  typename Op::Functor f_;
  DType dtype_;
  Geometry geo_;
};

// ---- Mod, BitShift: the attribute picks the functor when the kernel is built.
bool mod_cuda(const KernelBuildInfo& info, std::string* why) {
  return mod_fmod(info) ? supports<FModOp>(info, why) : supports<IntModOp>(info, why);
}
std::unique_ptr<Kernel> make_mod(const KernelBuildInfo& info) {
  if (mod_fmod(info)) return make_kernel<BinaryKernel<FModOp>>(info);
  return make_kernel<BinaryKernel<IntModOp>>(info);
}
bool bitshift_cuda(const KernelBuildInfo& info, std::string* why) {
  return bitshift_supports(info, why) && supports<ShlOp>(info, why);
}
std::unique_ptr<Kernel> make_bitshift(const KernelBuildInfo& info) {
  if (bitshift_left(info)) return make_kernel<BinaryKernel<ShlOp>>(info);
  return make_kernel<BinaryKernel<ShrOp>>(info);
}

// ---- Pow: the exponent's dtype may differ from the base's.
constexpr unsigned kPowBaseCuda = kPowBase & kCudaElementwiseTypes;
constexpr unsigned kPowExpCuda = kNumericTypes & kCudaElementwiseTypes;
bool pow_cuda(const KernelBuildInfo& info, std::string* why) {
  return pow_supports(info, why) && check_input_dtype(info, 0, kPowBaseCuda, why) &&
         check_input_dtype(info, 1, kPowExpCuda, why) && broadcast_fits(info, {0, 1}, why);
}
class PowKernel final : public Kernel {
 public:
  explicit PowKernel(const KernelBuildInfo& info)
      : base_(info.input_dtype(0)), exp_(info.input_dtype(1)), geo_(info, {0, 1}) {}
  void run(KernelContext& ctx) const override {
    const cudaStream_t s = stream_of(ctx);
    dispatch_typeset<kPowBaseCuda>(base_, [&](auto ta) {
      using A = typename decltype(ta)::type;
      dispatch_typeset<kPowExpCuda>(exp_, [&](auto tb) {
        using B = typename decltype(tb)::type;
        launch2(geo_, ctx.inputs[0].as<const A>(), ctx.inputs[1].as<const B>(), ctx.outputs[0].as<A>(),
                Lift2<A, Pow>{}, s);
      });
    });
  }
  const char* impl_name() const override { return "cuda elementwise"; }

 private:
  DType base_, exp_;
  Geometry geo_;
};

// ---- Where(cond, x, y): selects by element width, like the CPU kernel.
struct Select {
  template <typename U> TWINFER_HD U operator()(bool c, U x, U y) const { return c ? x : y; }
};
bool where_cuda(const KernelBuildInfo& info, std::string* why) {
  return check_input_dtype(info, 0, kBool, why) && check_input_dtype(info, 1, kAllTypes, why) &&
         check_same_dtype(info, {1, 2}, why) && broadcast_fits(info, {0, 1, 2}, why);
}
class WhereKernel final : public Kernel {
 public:
  explicit WhereKernel(const KernelBuildInfo& info) : width_(dtype_size(info.input_dtype(1))), geo_(info, {0, 1, 2}) {}
  void run(KernelContext& ctx) const override {
    const LaunchConfig lc = elementwise_launch(geo_.n);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    auto go = [&](auto tag) {
      using U = decltype(tag);
      twinfer_gpu::ternary_bcast<<<lc.blocks, lc.threads, 0, s>>>(
          geo_.n, geo_.calc, ctx.inputs[0].as<const bool>(), ctx.inputs[1].as<const U>(),
          ctx.inputs[2].as<const U>(), ctx.outputs[0].as<U>(), Select{});
    };
    switch (width_) {
      case 1: go(uint8_t{}); break;
      case 2: go(uint16_t{}); break;
      case 4: go(uint32_t{}); break;
      case 8: go(uint64_t{}); break;
      default: throw Error(ErrorKind::kDType, "Where: unsupported element width");
    }
    check_launch("Where kernel launch");
  }
  const char* impl_name() const override { return "cuda elementwise"; }

 private:
  size_t width_;
  Geometry geo_;
};

}  // namespace

#define TWINFER_CUDA_BINARY(op, Traits) \
  TWINFER_REGISTER_KERNEL(op, Backend::kCUDA, 0, supports<Traits>, make_kernel<BinaryKernel<Traits>>);
TWINFER_BINARY_OPS(TWINFER_CUDA_BINARY)
TWINFER_COMPARE_OPS(TWINFER_CUDA_BINARY)
TWINFER_CUDA_BINARY("PRelu", PReluOp)
#undef TWINFER_CUDA_BINARY
TWINFER_REGISTER_KERNEL("Mod", Backend::kCUDA, 0, mod_cuda, make_mod);
TWINFER_REGISTER_KERNEL("BitShift", Backend::kCUDA, 0, bitshift_cuda, make_bitshift);
TWINFER_REGISTER_KERNEL("Pow", Backend::kCUDA, 0, pow_cuda, make_kernel<PowKernel>);
TWINFER_REGISTER_KERNEL("Where", Backend::kCUDA, 0, where_cuda, make_kernel<WhereKernel>);

}  // namespace twinfer::cuda
