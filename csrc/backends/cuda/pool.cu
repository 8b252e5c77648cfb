// MaxPool / AveragePool on CUDA (NCHW, or NHWC for the com.twinfer.nhwc
// forms; 1-3 spatial dims; MaxPool's Indices output in NCHW, counted as the
// CPU counts them, ops/nn/pool_indices.h): one thread per output element
// walks its window, with the CPU kernel's rules
// (ops/nn/pool.cc): windows clipped to the input; with count_include_pad
// the divisor is the window clipped to the padded extent; a max starts at
// the window's first element (so a NaN there stays, later NaNs are passed
// over) and an empty window gives the lowest float, as the CPU's does.
// Channels-last, neighbouring threads are neighbouring channels of one
// position, so their loads coalesce.
#include <cfloat>

#include "backends/cuda/channels_last_index.h"
#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/kernel_util.h"
#include "graph/domains.h"
#include "ops/nn/pool.h"
#include "ops/nn/pool_indices.h"

namespace twinfer_gpu {

struct PoolDim {
  int64_t in = 1, out = 1, kernel = 1, stride = 1, dil = 1, pad_begin = 0, pad_end = 0;
};

struct PoolGeom {
  PoolDim d[3];  // depth, height, width (missing dims are 1)
  twinfer::cuda::PoolIndex index;  // output element -> position and plane (the same dims, and the layout)
  bool is_max = true, include_pad = false;
  bool column_major = false;  // Indices with storage_order=1
};

// The window of output position o along dim `p`: first input index, taps
// inside the input, taps inside the padded extent. In I: int64_t for the
// generic kernel (PoolDim), int for the 32-bit one (PoolDim32).
template <typename Dim, typename I>
__device__ __forceinline__ void window(const Dim& p, I o, I* first, I* taps, I* padded) {
  const I start = o * p.stride - p.pad_begin;
  I f = -1, n = 0, np = 0;
  for (I k = 0; k < p.kernel; ++k) {
    const I i = start + k * p.dil;
    if (i >= -p.pad_begin && i < p.in + p.pad_end) ++np;
    if (i >= 0 && i < p.in) {
      if (f < 0) f = i;
      ++n;
    }
  }
  *first = f;
  *taps = n;
  *padded = np;
}

// An empty window's maximum: the CPU's numeric_limits<C>::lowest(), C the
// compute type (float for the float types, the type itself for int8/uint8).
template <typename T> __device__ __forceinline__ float empty_max() { return -FLT_MAX; }
template <> __device__ __forceinline__ float empty_max<int8_t>() { return -128.f; }
template <> __device__ __forceinline__ float empty_max<uint8_t>() { return 0.f; }

template <typename T>
__global__ void pool_nd(int64_t total, PoolGeom g, const T* __restrict__ x, T* __restrict__ y,
                        int64_t* __restrict__ indices) {
  const PoolDim &D = g.d[0], &H = g.d[1], &W = g.d[2];
  const int64_t step = g.index.step();  // between spatial positions of one plane: 1 (NCHW) or C (NHWC)
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    int64_t od, oh, ow, base;
    g.index.position(i, &od, &oh, &ow, &base);
    int64_t fd, td, pd, fh, th, ph, fw, tw, pw;
    window(D, od, &fd, &td, &pd);
    window(H, oh, &fh, &th, &ph);
    window(W, ow, &fw, &tw, &pw);
    const T* xp = x + base;
    if (g.is_max) {
      float best = 0.f;
      bool have = false;
      int64_t bd = 0, bh = 0, bw = 0;  // where the maximum is (Indices)
      for (int64_t kd = 0; kd < td; ++kd)
        for (int64_t kh = 0; kh < th; ++kh)
          for (int64_t kw = 0; kw < tw; ++kw) {
            const int64_t id = fd + kd * D.dil, ih = fh + kh * H.dil, iw = fw + kw * W.dil;
            const float v = twinfer::ew::load(xp[((id * H.in + ih) * W.in + iw) * step]);
            if (!have || v > best) {
              best = v;
              have = true;
              bd = id, bh = ih, bw = iw;
            }
          }
      y[i] = twinfer::ew::store<T>(have ? best : empty_max<T>());
      if (indices)  // NCHW only (pool_supports): `base` is the plane's first element
        indices[i] = have ? twinfer::nn::max_pool_index(base, bd, bh, bw, D.in, H.in, W.in, g.column_major) : -1;
    } else {
      float sum = 0.f;
      for (int64_t kd = 0; kd < td; ++kd)
        for (int64_t kh = 0; kh < th; ++kh)
          for (int64_t kw = 0; kw < tw; ++kw)
            sum += twinfer::ew::load(
                xp[(((fd + kd * D.dil) * H.in + fh + kh * H.dil) * W.in + fw + kw * W.dil) * step]);
      const int64_t cnt = g.include_pad ? pd * ph * pw : td * th * tw;
      y[i] = twinfer::ew::store<T>(cnt > 0 ? sum / static_cast<float>(cnt) : 0.f);
    }
  }
}

// Pooling whose tensors hold under 2^31 elements (and no Indices output),
// in 32-bit index math; channels-last with V neighbouring channels a thread
// (one 16-byte load a tap where C and the pointers allow, else V = 1), NCHW
// one element a thread: the generic kernel above does
// its window math in 64 bits for every element, and 64-bit division is a
// long instruction sequence on the GPU; it took 2 ms of an H200's 9.4 ms for
// ResNet-50 fp16 at batch 256, its MaxPool alone reading 0.4 GB.
struct PoolDim32 {
  int in = 1, out = 1, kernel = 1, stride = 1, dil = 1, pad_begin = 0, pad_end = 0;
};
struct Pool32 {
  PoolDim32 d[3];          // depth, height, width (missing dims are 1)
  int channel_groups = 1;  // C / V (channels-last)
  int channels = 1;
  bool channels_last = true;  // false: NCHW, one element a thread (V = 1)
  bool is_max = true, include_pad = false;
};

template <typename T, int V>
__global__ void pool32(uint32_t groups_total, Pool32 g, const T* __restrict__ x, T* __restrict__ y) {
  const PoolDim32 &D = g.d[0], &H = g.d[1], &W = g.d[2];
  const uint32_t stride = gridDim.x * blockDim.x;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < groups_total; i += stride) {
    uint32_t r = i;
    int cg = 0;
    if (g.channels_last) {
      cg = static_cast<int>(r % g.channel_groups);
      r /= g.channel_groups;
    }
    const int ow = static_cast<int>(r % W.out);
    r /= W.out;
    const int oh = static_cast<int>(r % H.out);
    r /= H.out;
    const int od = static_cast<int>(r % D.out);
    const uint32_t n = r / D.out;  // the sample (NHWC) or the plane n * C + c (NCHW)
    int fd, td, pd, fh, th, ph, fw, tw, pw;
    window(D, od, &fd, &td, &pd);
    window(H, oh, &fh, &th, &ph);
    window(W, ow, &fw, &tw, &pw);
    const uint32_t plane = static_cast<uint32_t>(D.in * H.in * W.in);
    const T* xp = g.channels_last ? x + (n * plane) * g.channels + cg * V : x + n * plane;
    const int step = g.channels_last ? g.channels : 1;
    float acc[V];
    bool have = false;
#pragma unroll
    for (int k = 0; k < V; ++k) acc[k] = 0.f;
    for (int kd = 0; kd < td; ++kd)
      for (int kh = 0; kh < th; ++kh)
        for (int kw = 0; kw < tw; ++kw) {
          const int id = fd + kd * D.dil, ih = fh + kh * H.dil, iw = fw + kw * W.dil;
          const Pack<T, V> p = *reinterpret_cast<const Pack<T, V>*>(xp + ((id * H.in + ih) * W.in + iw) * step);
#pragma unroll
          for (int k = 0; k < V; ++k) {
            const float v = twinfer::ew::load(p.v[k]);
            if (!g.is_max) acc[k] += v;
            else if (!have || v > acc[k]) acc[k] = v;  // per lane, the generic kernel's NaN rule
          }
          have = true;
        }
    Pack<T, V> out;
    const int cnt = g.include_pad ? pd * ph * pw : td * th * tw;
#pragma unroll
    for (int k = 0; k < V; ++k)
      out.v[k] = twinfer::ew::store<T>(g.is_max ? (have ? acc[k] : empty_max<T>())
                                                : (cnt > 0 ? acc[k] / static_cast<float>(cnt) : 0.f));
    reinterpret_cast<Pack<T, V>*>(y)[i] = out;
  }
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {
namespace {

// MaxPool also takes int8 / uint8 (opset 12), compared as floats, which
// hold every 8-bit value exactly; AveragePool the float types alone.
constexpr unsigned kPoolTypes = ew::kF32 | ew::kF16 | ew::kBF16 | ew::kI8 | ew::kU8;
constexpr unsigned kAveragePoolTypes = ew::kF32 | ew::kF16 | ew::kBF16;

bool pool_supports(const KernelBuildInfo& info, std::string* why) {
  const bool max = info.node().op_type == "MaxPool";
  if (!ew::check_input_dtype(info, 0, max ? kPoolTypes : kAveragePoolTypes, why)) return false;
  const nn::PoolSpec ps = nn::pool_spec(info);
  if (ps.want_indices && ps.channels_last) {  // the channels_last pass leaves such MaxPools in NCHW
    if (why) *why = "MaxPool's Indices output has no channels-last CUDA kernel";
    return false;
  }
  if (ps.win.nsp < 1 || ps.win.nsp > 3) {  // the kernel's geometry holds 3 spatial dims
    if (why) *why = "the CUDA pooling kernel takes 1 to 3 spatial dims, not " + std::to_string(ps.win.nsp);
    return false;
  }
  return true;
}

class CudaPool final : public Kernel {
 public:
  explicit CudaPool(const KernelBuildInfo& info) : dtype_(info.input_dtype(0)) {
    const nn::PoolSpec ps = nn::pool_spec(info);
    g_.is_max = ps.is_max;
    g_.include_pad = ps.include_pad;
    g_.column_major = info.node().attr_int("storage_order", 0) == 1;
    want_indices_ = ps.want_indices;
    const size_t off = 3 - ps.win.nsp;
    for (size_t j = 0; j < ps.win.nsp; ++j) {
      twinfer_gpu::PoolDim& p = g_.d[off + j];
      p.in = ps.x[2 + j];
      p.out = ps.y[2 + j];
      p.kernel = ps.win.kernel[j];
      p.stride = ps.win.stride[j];
      p.dil = ps.win.dilation[j];
      p.pad_begin = ps.win.pad_begin[j];
      p.pad_end = ps.win.pad_end[j];
    }
    twinfer::cuda::PoolIndex& ix = g_.index;
    ix.channels = ps.x[1];
    ix.channels_last = ps.channels_last;
    ix.in_d = g_.d[0].in, ix.in_h = g_.d[1].in, ix.in_w = g_.d[2].in;
    ix.out_d = g_.d[0].out, ix.out_h = g_.d[1].out, ix.out_w = g_.d[2].out;
    total_ = ps.x[0] * ps.x[1] * g_.d[0].out * g_.d[1].out * g_.d[2].out;
    name_ = ps.channels_last ? "cuda pool nhwc" : "cuda pool";
    // The 32-bit kernel: both tensors under 2^31 elements, no Indices output.
    const int64_t in_total = ps.x[0] * ps.x[1] * g_.d[0].in * g_.d[1].in * g_.d[2].in;
    // window()'s int arithmetic in the 32-bit kernel, for any window a model may give.
    bool windows_fit = true;
    for (const twinfer_gpu::PoolDim& p : g_.d)
      windows_fit = windows_fit && p.in + p.pad_begin + p.pad_end < INT32_MAX / 2 &&
                    p.out * p.stride < INT32_MAX / 2 && (p.kernel - 1) * p.dil + 1 < INT32_MAX / 2;
    if (!want_indices_ && in_total < INT32_MAX && total_ < INT32_MAX && windows_fit) {
      bits32_ = true;
      g32_.channels = static_cast<int>(ps.x[1]);
      g32_.channels_last = ps.channels_last;
      g32_.is_max = g_.is_max;
      g32_.include_pad = g_.include_pad;
      for (int j = 0; j < 3; ++j) {
        const twinfer_gpu::PoolDim& p = g_.d[j];
        g32_.d[j] = {static_cast<int>(p.in), static_cast<int>(p.out), static_cast<int>(p.kernel),
                     static_cast<int>(p.stride), static_cast<int>(p.dil), static_cast<int>(p.pad_begin),
                     static_cast<int>(p.pad_end)};
      }
      // Channels a thread: a 16-byte pack (at most 8) when C divides into them.
      ew::dispatch_typeset<kPoolTypes>(dtype_, [&](auto tag) {
        using T = typename decltype(tag)::type;
        constexpr int v = twinfer_gpu::flat_vec<T>();
        vec_ = ps.channels_last && ps.x[1] % v == 0 ? v : 1;
      });
      if (vec_ > 1) name_ = "cuda pool nhwc (channels in packs)";
    }
  }
  void run(KernelContext& ctx) const override {
    const ew::LaunchConfig lc = ew::elementwise_launch(total_);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    if (bits32_) return run32(ctx, s);
    ew::dispatch_typeset<kPoolTypes>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      twinfer_gpu::pool_nd<<<lc.blocks, lc.threads, 0, s>>>(
          total_, g_, ctx.inputs[0].as<const T>(), ctx.outputs[0].as<T>(),
          want_indices_ ? ctx.outputs[1].as<int64_t>() : nullptr);
    });
    check_launch("pooling launch");
  }
  const char* impl_name() const override { return name_; }

 private:
  void run32(KernelContext& ctx, cudaStream_t s) const {
    ew::dispatch_typeset<kPoolTypes>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      constexpr int V = twinfer_gpu::flat_vec<T>();
      const T* x = ctx.inputs[0].as<const T>();
      T* y = ctx.outputs[0].as<T>();
      // Packs need 16-byte aligned rows; a caller's odd pointer goes one channel at a time.
      const bool packs = vec_ == V && reinterpret_cast<uintptr_t>(x) % sizeof(twinfer_gpu::Pack<T, V>) == 0 &&
                         reinterpret_cast<uintptr_t>(y) % sizeof(twinfer_gpu::Pack<T, V>) == 0;
      twinfer_gpu::Pool32 g = g32_;
      g.channel_groups = g32_.channels / (packs ? V : 1);
      const int64_t groups = total_ / (packs ? V : 1);
      const ew::LaunchConfig lc = ew::elementwise_launch(groups);
      if (packs)
        twinfer_gpu::pool32<T, V><<<lc.blocks, lc.threads, 0, s>>>(static_cast<uint32_t>(groups), g, x, y);
      else
        twinfer_gpu::pool32<T, 1><<<lc.blocks, lc.threads, 0, s>>>(static_cast<uint32_t>(groups), g, x, y);
    });
    check_launch("pooling launch");
  }

  DType dtype_;
  bool bits32_ = false;  // run32: the 32-bit kernel
  int vec_ = 1;          // channels a thread there, when the pointers allow
  twinfer_gpu::Pool32 g32_;
  const char* name_ = "cuda pool";
  twinfer_gpu::PoolGeom g_;
  int64_t total_ = 0;
  bool want_indices_ = false;
};

}  // namespace

TWINFER_REGISTER_KERNEL("MaxPool", Backend::kCUDA, 0, pool_supports, make_kernel<CudaPool>);
TWINFER_REGISTER_KERNEL("AveragePool", Backend::kCUDA, 0, pool_supports, make_kernel<CudaPool>);
TWINFER_REGISTER_KERNEL("MaxPool", Backend::kCUDA, 0, pool_supports, make_kernel<CudaPool>, kChannelsLastDomain);
TWINFER_REGISTER_KERNEL("AveragePool", Backend::kCUDA, 0, pool_supports, make_kernel<CudaPool>, kChannelsLastDomain);

}  // namespace twinfer::cuda
