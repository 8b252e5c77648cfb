// Pad on CUDA (constant, reflect, edge and wrap modes, negative pads, the
// axes input) with the CPU kernel's plan (ops/tensor/pad_plan.h): its per-dim
// maps from output index to input index (-1: the pad value) copied to the
// device once, then a thread per output element. The pads must be constants;
// the pad value may come from a tensor on the device (input 2).
#include <cstring>
#include <memory>

#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/kernel_util.h"
#include "ops/elementwise/offset_calc.h"
#include "ops/tensor/pad_plan.h"

namespace twinfer_gpu {

// Dims innermost first: sizes (the output's), where each dim's map starts,
// and the input's strides.
struct PadGeom {
  int rank = 0;
  twinfer::ew::FastDivmod sizes[twinfer::ew::kMaxOffsetDims];
  int64_t map_at[twinfer::ew::kMaxOffsetDims] = {};
  int64_t stride[twinfer::ew::kMaxOffsetDims] = {};
};

template <typename U>
__global__ void pad_gather(int64_t n, PadGeom g, const int64_t* __restrict__ maps, const U* __restrict__ x,
                           const U* __restrict__ value_ptr, U value, U* __restrict__ y) {
  const U v = value_ptr ? *value_ptr : value;
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    uint64_t linear = static_cast<uint64_t>(i);
    int64_t off = 0;
    bool pad = false;
    for (int d = 0; d < g.rank; ++d) {
      uint64_t q, r;
      g.sizes[d].divmod(linear, q, r);
      const int64_t src = maps[g.map_at[d] + static_cast<int64_t>(r)];
      pad |= src < 0;
      off += src * g.stride[d];
      linear = q;
    }
    y[i] = pad ? v : x[off];
  }
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {
namespace {

bool width_ok(size_t b) { return b == 1 || b == 2 || b == 4 || b == 8; }

bool pad_supports(const KernelBuildInfo& info, std::string* why) {
  auto k = cpu_plan_kernel<tensor::PadPlanKernel>(info, why);
  if (!k) return false;
  if (!k->fixed_maps()) {
    if (why) *why = "pads computed at run time (the CUDA Pad needs constants)";
    return false;
  }
  if (!width_ok(dtype_size(info.input_dtype(0))) ||
      k->input_shape().size() > static_cast<size_t>(ew::kMaxOffsetDims)) {
    if (why) *why = "a Pad of this element size or rank has no CUDA kernel";
    return false;
  }
  return true;
}

class CudaPad final : public Kernel {
 public:
  explicit CudaPad(const KernelBuildInfo& info) : elem_(dtype_size(info.input_dtype(0))) {
    std::string why;
    auto k = cpu_plan_kernel<tensor::PadPlanKernel>(info, &why);
    if (!k || !k->fixed_maps()) info.fail(ErrorKind::kUnsupportedOp, why.empty() ? "pads computed at run time" : why);
    const Shape& in = k->input_shape();
    const Shape& out = k->output_shape();
    n_ = shape_numel(out);
    const Shape st = contiguous_strides(in);
    const int r = static_cast<int>(in.size());
    g_.rank = r;
    for (int d = 0; d < r; ++d) {  // innermost first
      const int from = r - 1 - d;
      g_.sizes[d] = ew::FastDivmod(static_cast<uint64_t>(out[from] > 0 ? out[from] : 1));
      g_.map_at[d] = static_cast<int64_t>(k->map_offsets()[from]);
      g_.stride[d] = st[from];
    }
    const std::vector<int64_t>& idx = k->map_indices();
    if (!idx.empty()) maps_ = device_copy(idx.data(), DType::kInt64, {static_cast<int64_t>(idx.size())});
    attr_value_ = k->value_from_attribute(&value_bytes_);
  }
  void run(KernelContext& ctx) const override {
    if (n_ == 0) return;
    const cudaStream_t s = stream_of(ctx);
    if (g_.rank == 0) {  // a scalar: nothing to pad
      check(cudaMemcpyAsync(ctx.outputs[0].data, ctx.inputs[0].data, elem_, cudaMemcpyDeviceToDevice, s),
            "cudaMemcpyAsync (Pad)");
      return;
    }
    const bool value_input = !attr_value_ && ctx.inputs.size() > 2 && ctx.inputs[2].data && ctx.inputs[2].numel() > 0;
    const ew::LaunchConfig lc = ew::elementwise_launch(n_);
    auto launch = [&](auto tag) {
      using U = decltype(tag);
      U value{};
      std::memcpy(&value, &value_bytes_, sizeof(U));
      twinfer_gpu::pad_gather<<<lc.blocks, lc.threads, 0, s>>>(
          n_, g_, maps_.data_as<int64_t>(), ctx.inputs[0].as<const U>(),
          value_input ? ctx.inputs[2].as<const U>() : nullptr, value, ctx.outputs[0].as<U>());
    };
    dispatch_width(elem_, launch);
    check_launch("Pad launch");
  }
  const char* impl_name() const override { return "cuda pad"; }

 private:
  size_t elem_;
  int64_t n_ = 0;
  twinfer_gpu::PadGeom g_;
  Tensor maps_;
  bool attr_value_ = false;
  uint64_t value_bytes_ = 0;
};

}  // namespace

TWINFER_REGISTER_KERNEL("Pad", Backend::kCUDA, 0, pad_supports, make_kernel<CudaPad>);

}  // namespace twinfer::cuda
