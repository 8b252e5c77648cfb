// Resize / Upsample on CUDA with the CPU kernel's plan (ops/vision/resize_plan.h):
// per resized dim, its table of taps (input index and weight per output
// index) copied to the device once; a thread per output element sums its
// taps (nearest: picks one, any dtype, bit exact; linear / cubic: float
// weights, float32 / float16 / bfloat16 data, accumulated in float). Up to
// three resized dims and 64 taps an element; scales / sizes / roi must be
// constants. The CPU resizes axis by axis; the sum here is in one step, so
// results differ from it by float rounding only.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/kernel_util.h"
#include "ops/elementwise/offset_calc.h"
#include "ops/vision/resize_plan.h"

namespace twinfer_gpu {

constexpr int kMaxResized = 3;

struct ResizeGeom {
  int rank = 0;                                            // dims innermost first
  twinfer::ew::FastDivmod sizes[twinfer::ew::kMaxOffsetDims];  // the output's
  int64_t stride[twinfer::ew::kMaxOffsetDims] = {};        // the input's
  int slot[twinfer::ew::kMaxOffsetDims] = {};              // -1: identity, else the resized dim's slot
  int resized = 0;
  int64_t at[kMaxResized] = {};    // where the slot's table starts (index / weight: out * taps)
  int64_t fill_at[kMaxResized] = {};
  int taps[kMaxResized] = {1, 1, 1};
};

// Input offset of an output element's identity dims, and its coordinate along each resized dim.
__device__ __forceinline__ int64_t resize_coords(const ResizeGeom& g, int64_t i, int64_t* o) {
  uint64_t linear = static_cast<uint64_t>(i);
  int64_t base = 0;
  for (int d = 0; d < g.rank; ++d) {
    uint64_t q, r;
    g.sizes[d].divmod(linear, q, r);
    if (g.slot[d] < 0) base += static_cast<int64_t>(r) * g.stride[d];
    else o[g.slot[d]] = static_cast<int64_t>(r);
    linear = q;
  }
  return base;
}

template <typename U>
__global__ void resize_nearest(int64_t n, ResizeGeom g, const int64_t* __restrict__ index, const U* __restrict__ x,
                               U fill, U* __restrict__ y) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    int64_t o[kMaxResized] = {0, 0, 0};
    int64_t off = resize_coords(g, i, o);
    bool outside = false;
    for (int d = 0; d < g.rank; ++d) {
      const int s = g.slot[d];
      if (s < 0) continue;
      const int64_t src = index[g.at[s] + o[s]];
      outside |= src < 0;
      off += src * g.stride[d];
    }
    y[i] = outside ? fill : x[off];
  }
}

template <typename T>
__global__ void resize_taps(int64_t n, ResizeGeom g, const int64_t* __restrict__ index, const float* __restrict__ weight,
                            const uint8_t* __restrict__ fills, const T* __restrict__ x, float fill, T* __restrict__ y) {
  int dim_of[kMaxResized] = {0, 0, 0};
  for (int d = 0; d < g.rank; ++d)
    if (g.slot[d] >= 0) dim_of[g.slot[d]] = d;
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    int64_t o[kMaxResized] = {0, 0, 0};
    const int64_t base = resize_coords(g, i, o);
    bool outside = false;
    for (int s = 0; s < g.resized; ++s) outside |= fills[g.fill_at[s] + o[s]] != 0;
    if (outside) {
      y[i] = twinfer::ew::store<T>(fill);
      continue;
    }
    float acc = 0.f;
    const int t1 = g.resized > 1 ? g.taps[1] : 1, t2 = g.resized > 2 ? g.taps[2] : 1;
    for (int a = 0; a < g.taps[0]; ++a) {
      const int64_t k0 = g.at[0] + o[0] * g.taps[0] + a;
      const float w0 = weight[k0];
      const int64_t off0 = base + index[k0] * g.stride[dim_of[0]];
      for (int b = 0; b < t1; ++b) {
        float w1 = w0;
        int64_t off1 = off0;
        if (g.resized > 1) {
          const int64_t k1 = g.at[1] + o[1] * g.taps[1] + b;
          w1 *= weight[k1];
          off1 += index[k1] * g.stride[dim_of[1]];
        }
        for (int c = 0; c < t2; ++c) {
          float w2 = w1;
          int64_t off2 = off1;
          if (g.resized > 2) {
            const int64_t k2 = g.at[2] + o[2] * g.taps[2] + c;
            w2 *= weight[k2];
            off2 += index[k2] * g.stride[dim_of[2]];
          }
          acc += w2 * twinfer::ew::load(x[off2]);
        }
      }
    }
    y[i] = twinfer::ew::store<T>(acc);
  }
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {
namespace {

constexpr unsigned kInterpTypes = ew::kF32 | ew::kF16 | ew::kBF16;

bool resize_supports(const KernelBuildInfo& info, std::string* why) {
  auto no = [&](const std::string& w) {
    if (why) *why = w;
    return false;
  };
  auto k = cpu_plan_kernel<vision::ResizePlanKernel>(info, why);
  if (!k) return false;
  if (!k->fixed_plan()) return no("scales, sizes or roi computed at run time (the CUDA Resize needs constants)");
  const size_t elem = dtype_size(info.input_dtype(0));
  if (k->nearest() ? !(elem == 1 || elem == 2 || elem == 4 || elem == 8) : !ew::in_typeset(kInterpTypes, info.input_dtype(0)))
    return no(std::string("a CUDA Resize of ") + dtype_name(info.input_dtype(0)) + " in this mode runs on the CPU");
  if (k->input_shape().size() > static_cast<size_t>(ew::kMaxOffsetDims)) return no("a Resize of rank > 8 runs on the CPU");
  int resized = 0;
  int64_t taps = 1;
  for (const auto& a : k->axis_taps())
    if (!a.identity) {
      ++resized;
      taps = std::min<int64_t>(taps * a.taps, 1 << 20);  // no overflow: antialias has thousands of taps a dim
    }
  if (resized > twinfer_gpu::kMaxResized || taps > 64)
    return no("a Resize of more than 3 dims or 64 taps an element runs on the CPU");
  // The CPU blends an outer dim's fill into later passes (fill x the weights):
  // equal to writing the fill at once only for a finite fill.
  if (!k->nearest() && !std::isfinite(info.node().attr_float("extrapolation_value", 0.f)))
    return no("a Resize with a non-finite extrapolation_value runs on the CPU");
  return true;
}

class CudaResize final : public Kernel {
 public:
  explicit CudaResize(const KernelBuildInfo& info) : dtype_(info.input_dtype(0)) {
    std::string why;
    auto k = cpu_plan_kernel<vision::ResizePlanKernel>(info, &why);
    if (!k || !k->fixed_plan()) info.fail(ErrorKind::kUnsupportedOp, why.empty() ? "no constant Resize plan" : why);
    nearest_ = k->nearest();
    fill_bits_ = k->fill_bits();
    const Shape& in = k->input_shape();
    const Shape& out = k->output_shape();
    n_ = shape_numel(out);
    const Shape st = contiguous_strides(in);
    const std::vector<vision::ResizeAxisTaps> axes = k->axis_taps();
    std::vector<int64_t> index;
    std::vector<float> weight;
    std::vector<uint8_t> fills;
    const int r = static_cast<int>(in.size());
    g_.rank = r;
    for (int d = 0; d < r; ++d) {  // innermost first
      const int from = r - 1 - d;
      g_.sizes[d] = ew::FastDivmod(static_cast<uint64_t>(out[from] > 0 ? out[from] : 1));
      g_.stride[d] = st[from];
      const vision::ResizeAxisTaps& a = axes[from];
      if (a.identity) {
        g_.slot[d] = -1;
        continue;
      }
      const int s = g_.resized++;
      g_.slot[d] = s;
      g_.taps[s] = a.taps;
      g_.at[s] = static_cast<int64_t>(index.size());
      g_.fill_at[s] = static_cast<int64_t>(fills.size());
      index.insert(index.end(), a.index.begin(), a.index.end());
      weight.insert(weight.end(), a.weight.begin(), a.weight.end());
      fills.insert(fills.end(), a.fill.begin(), a.fill.end());
    }
    if (!index.empty()) index_ = device_copy(index.data(), DType::kInt64, {static_cast<int64_t>(index.size())});
    if (!weight.empty()) weight_ = device_copy(weight.data(), DType::kFloat32, {static_cast<int64_t>(weight.size())});
    if (!fills.empty()) fills_ = device_copy(fills.data(), DType::kUInt8, {static_cast<int64_t>(fills.size())});
  }
  void run(KernelContext& ctx) const override {
    const ew::LaunchConfig lc = ew::elementwise_launch(n_);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    if (g_.resized == 0) {  // nothing resized: the input's bytes
      check(cudaMemcpyAsync(ctx.outputs[0].data, ctx.inputs[0].data, ctx.outputs[0].bytes(), cudaMemcpyDeviceToDevice, s),
            "cudaMemcpyAsync (Resize)");
      return;
    }
    if (nearest_) {
      auto launch = [&](auto tag) {
        using U = decltype(tag);
        U fill;
        std::memcpy(&fill, &fill_bits_, sizeof(U));
        twinfer_gpu::resize_nearest<<<lc.blocks, lc.threads, 0, s>>>(n_, g_, index_.data_as<int64_t>(),
                                                                     ctx.inputs[0].as<const U>(), fill,
                                                                     ctx.outputs[0].as<U>());
      };
      dispatch_width(dtype_size(dtype_), launch);
    } else {
      ew::dispatch_typeset<kInterpTypes>(dtype_, [&](auto tag) {
        using T = typename decltype(tag)::type;
        T fill_t;
        std::memcpy(&fill_t, &fill_bits_, sizeof(T));
        twinfer_gpu::resize_taps<<<lc.blocks, lc.threads, 0, s>>>(
            n_, g_, index_.data_as<int64_t>(), weight_.data_as<float>(), fills_.data_as<uint8_t>(),
            ctx.inputs[0].as<const T>(), ew::load(fill_t), ctx.outputs[0].as<T>());
      });
    }
    check_launch("Resize launch");
  }
  const char* impl_name() const override { return nearest_ ? "cuda resize (nearest)" : "cuda resize (taps)"; }

 private:
  DType dtype_;
  bool nearest_ = true;
  uint64_t fill_bits_ = 0;
  int64_t n_ = 0;
  twinfer_gpu::ResizeGeom g_;
  Tensor index_, weight_, fills_;
};

}  // namespace

TWINFER_REGISTER_KERNEL("Resize", Backend::kCUDA, 0, resize_supports, make_kernel<CudaResize>);
TWINFER_REGISTER_KERNEL("Upsample", Backend::kCUDA, 0, resize_supports, make_kernel<CudaResize>);

}  // namespace twinfer::cuda
