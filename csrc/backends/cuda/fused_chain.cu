// CUDA kernel of com.twinfer::FusedElementwise: a chain of float elementwise
// ops in one pass over memory. Each thread loads its element's inputs (flat,
// or at their broadcast offsets), runs the shared program
// (ops/elementwise/fused_chain.h, the CPU kernel's arithmetic) in float
// registers and stores once. The program is uniform across the grid, so
// its switch does not diverge.
#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/kernel_util.h"
#include "graph/domains.h"
#include "ops/elementwise/fused_chain_node.h"
#include "ops/elementwise/typeset.h"

namespace twinfer_gpu {

using twinfer::ew::ChainProgram;
using twinfer::ew::kChainMaxInputs;
using twinfer::ew::kChainMaxSteps;

template <typename S>
struct ChainInputs {
  const S* in[kChainMaxInputs];
};

// Flat: every input is the output's shape (bit k of full_mask set) or one
// value; otherwise the offsets come from calc.
template <typename S, bool Flat>
__global__ void fused_chain(int64_t n, ChainProgram p, OffsetCalc<kChainMaxInputs> calc, ChainInputs<S> x,
                            uint32_t full_mask, S* __restrict__ y) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    float r[kChainMaxInputs + kChainMaxSteps];
    if constexpr (Flat) {
      for (int k = 0; k < p.num_inputs; ++k)
        r[k] = static_cast<float>(twinfer::ew::load(x.in[k][(full_mask >> k) & 1u ? i : 0]));
    } else {
      int64_t off[kChainMaxInputs];
      calc.get(static_cast<uint64_t>(i), off);
      for (int k = 0; k < p.num_inputs; ++k) r[k] = static_cast<float>(twinfer::ew::load(x.in[k][off[k]]));
    }
    y[i] = twinfer::ew::store<S>(twinfer::ew::chain_eval(p, r));
  }
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {
namespace {

using namespace twinfer::ew;

constexpr unsigned kChainCudaTypes = (kF32 | kF16 | kBF16) & kCudaElementwiseTypes;

std::vector<Shape> input_shapes(const KernelBuildInfo& info) {
  std::vector<Shape> s;
  for (size_t i = 0; i < info.num_inputs(); ++i) s.push_back(info.input_shape(i));
  return s;
}

bool supports(const KernelBuildInfo& info, std::string* why) {
  if (!check_input_dtype(info, 0, kChainCudaTypes, why)) return false;
  for (size_t i = 1; i < info.num_inputs(); ++i)
    if (!check_same_dtype(info, {0, i}, why)) return false;
  bool fits = true;
  chain_offsets(input_shapes(info), info.output_shape(0), &fits);
  if (!fits && why) *why = "a broadcast of more than " + std::to_string(kMaxOffsetDims) + " dims has no CUDA kernel";
  return fits;
}

class CudaFusedChain final : public Kernel {
 public:
  explicit CudaFusedChain(const KernelBuildInfo& info)
      : program_(chain_program(info.node())), dtype_(info.input_dtype(0)), n_(shape_numel(info.output_shape(0))) {
    const std::vector<Shape> ins = input_shapes(info);
    bool fits = true;
    calc_ = chain_offsets(ins, info.output_shape(0), &fits);
    if (!fits) throw Error(ErrorKind::kUnsupportedOp, "FusedElementwise: broadcast too deep for the CUDA kernel");
    const std::vector<int> kinds = chain_flat_kinds(ins, info.output_shape(0));
    flat_ = true;
    for (size_t k = 0; k < kinds.size(); ++k) {
      flat_ = flat_ && kinds[k] >= 0;
      if (kinds[k] == 1) full_mask_ |= 1u << k;
    }
    name_ = "cuda fused elementwise (" + chain_summary(program_) + ")";
  }

  void run(KernelContext& ctx) const override {
    const LaunchConfig lc = elementwise_launch(n_);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    dispatch_typeset<kChainCudaTypes>(dtype_, [&](auto tag) {
      using S = typename decltype(tag)::type;
      twinfer_gpu::ChainInputs<S> x{};
      for (int k = 0; k < program_.num_inputs; ++k) x.in[k] = ctx.inputs[k].as<const S>();
      S* y = ctx.outputs[0].as<S>();
      if (flat_)
        twinfer_gpu::fused_chain<S, true><<<lc.blocks, lc.threads, 0, s>>>(n_, program_, calc_, x, full_mask_, y);
      else
        twinfer_gpu::fused_chain<S, false><<<lc.blocks, lc.threads, 0, s>>>(n_, program_, calc_, x, full_mask_, y);
    });
    check_launch("fused elementwise kernel launch");
  }
  const char* impl_name() const override { return name_.c_str(); }

 private:
  ChainProgram program_;
  DType dtype_;
  int64_t n_;
  OffsetCalc<kChainMaxInputs> calc_;
  bool flat_ = false;
  uint32_t full_mask_ = 0;
  std::string name_;
};

}  // namespace

TWINFER_REGISTER_KERNEL(kFusedElementwiseOp, Backend::kCUDA, 0, supports, make_kernel<CudaFusedChain>, kTwinferDomain);

}  // namespace twinfer::cuda
