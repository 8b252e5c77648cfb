// Attention on CUDA (ONNX Attention, opset 23, and com.twinfer::Attention,
// which graph/passes/fuse_attention.cc writes for the spelled-out form):
// 4-D [B, H, S, D] query, key and value with as many key as query heads, an
// optional additive (float) or boolean mask broadcast onto [B, H, Sq, Sk],
// causal masking (upper-left: no cache here), the scale attribute (1/sqrt(D) without it).
// No KV cache, softcap or qk output: those stay on the CPU.
//
// One pass, the scores never in memory: a block takes kRowsPerBlock query
// rows of one (b, h); key and value rows go through shared memory kTile at a
// time (float), and each warp keeps its rows' running max, sum and weighted
// value sum in registers (the online softmax), lane l holding dims l, l + 32,
// ... A row whose keys are all masked gives zeros, as the CPU kernel (and
// ONNX's errata) does. Statistics and sums in float.
//
// float16 and bfloat16 go to cuDNN's fused flash attention first (tensor
// cores; sdpa_plan.h), without a mask, causal, or with an additive mask;
// what cuDNN refuses (and float32, boolean masks, a mask with causal) runs
// the kernel above. kernel_report's kernel name says which, and why.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/kernel_util.h"
#include "backends/cuda/sdpa_plan.h"
#include "graph/domains.h"

namespace twinfer_gpu {

constexpr int kAttnWarps = 4;
constexpr int kRowsPerWarp = 4;
constexpr int kRowsPerBlock = kAttnWarps * kRowsPerWarp;
constexpr int kTile = 16;  // key rows staged at a time

struct AttnGeom {
  int64_t B, H, Sq, Sk, D, Dv;
  int64_t q_tiles;           // blocks per (b, h)
  int64_t mstride[4];        // mask strides over [b, h, i, j] (0: broadcast); unused without a mask
  int mask_kind;             // 0 none, 1 float (the data's type), 2 bool
  bool causal;
  float scale;
};

template <typename T, int DL>  // DL: dims per lane (D and Dv <= 32 * DL)
__global__ void __launch_bounds__(kAttnWarps * 32)
    attention_rows(AttnGeom g, const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                   const void* __restrict__ mask, T* __restrict__ o) {
  extern __shared__ float sh[];  // [kTile][D] keys, then [kTile][Dv] values
  float* ks = sh;
  float* vs = sh + kTile * g.D;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t bh = blockIdx.x / g.q_tiles;
  const int64_t row0 = (blockIdx.x % g.q_tiles) * kRowsPerBlock + warp * kRowsPerWarp;
  const int64_t b = bh / g.H, h = bh % g.H;
  const T* kb = k + bh * g.Sk * g.D;
  const T* vb = v + bh * g.Sk * g.Dv;

  float qr[kRowsPerWarp][DL], acc[kRowsPerWarp][DL], mx[kRowsPerWarp], sum[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t i = row0 + r;
    mx[r] = -INFINITY;
    sum[r] = 0.f;
#pragma unroll
    for (int c = 0; c < DL; ++c) {
      const int64_t d = lane + 32 * c;
      qr[r][c] = (i < g.Sq && d < g.D) ? twinfer::ew::load(q[(bh * g.Sq + i) * g.D + d]) : 0.f;
      acc[r][c] = 0.f;
    }
  }
  for (int64_t j0 = 0; j0 < g.Sk; j0 += kTile) {
    const int n = static_cast<int>(g.Sk - j0 < kTile ? g.Sk - j0 : kTile);
    __syncthreads();  // the previous tile is read by every warp
    for (int64_t e = threadIdx.x; e < n * g.D; e += blockDim.x) ks[e] = twinfer::ew::load(kb[j0 * g.D + e]);
    for (int64_t e = threadIdx.x; e < n * g.Dv; e += blockDim.x) vs[e] = twinfer::ew::load(vb[j0 * g.Dv + e]);
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int64_t i = row0 + r;
      if (i >= g.Sq) continue;  // the warp as a whole: i is the same in every lane
      for (int t = 0; t < n; ++t) {
        const int64_t j = j0 + t;
        float s = 0.f;
#pragma unroll
        for (int c = 0; c < DL; ++c) {
          const int64_t d = lane + 32 * c;
          if (d < g.D) s += qr[r][c] * ks[t * g.D + d];
        }
        for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
        s *= g.scale;
        if (g.mask_kind) {
          const int64_t mi = b * g.mstride[0] + h * g.mstride[1] + i * g.mstride[2] + j * g.mstride[3];
          if (g.mask_kind == 2) {
            if (!static_cast<const bool*>(mask)[mi]) s = -INFINITY;
          } else {
            s += twinfer::ew::load(static_cast<const T*>(mask)[mi]);
          }
        }
        if (g.causal && j > i) s = -INFINITY;  // upper-left, as ONNX without a cache (and the CPU kernel)
        if (s == -INFINITY) continue;  // no weight; keeps an all-masked row at zero
        const float m_new = fmaxf(mx[r], s);
        const float corr = expf(mx[r] - m_new), p = expf(s - m_new);
        mx[r] = m_new;
        sum[r] = sum[r] * corr + p;
#pragma unroll
        for (int c = 0; c < DL; ++c) {
          const int64_t d = lane + 32 * c;
          acc[r][c] = acc[r][c] * corr + (d < g.Dv ? p * vs[t * g.Dv + d] : 0.f);
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t i = row0 + r;
    if (i >= g.Sq) continue;
    const float inv = sum[r] > 0.f ? 1.f / sum[r] : 0.f;
#pragma unroll
    for (int c = 0; c < DL; ++c) {
      const int64_t d = lane + 32 * c;
      if (d < g.Dv) o[(bh * g.Sq + i) * g.Dv + d] = twinfer::ew::store<T>(acc[r][c] * inv);
    }
  }
}

// A mask broadcast over queries, written out as [mb, mh, Sq, Sk] for cuDNN
// when it does not take the broadcast form (m: the mask's [mb, mh, 1, Sk]).
template <typename T>
__global__ void expand_mask_rows(const T* __restrict__ m, T* __restrict__ out, int64_t rows, int64_t Sq, int64_t Sk) {
  const int64_t n = rows * Sq * Sk;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = e % Sk, r = e / (Sq * Sk);
    out[e] = m[r * Sk + j];
  }
}

// After cuDNN: output rows whose mask row is -inf at every key become zeros,
// as ONNX's errata (and our own kernel) have them; flash kernels leave them
// undefined (0/0). A warp per row of the mask itself ([mb, mh, mi, mj],
// contiguous), which zeroes every output row that mask row covers.
struct MaskRows {
  int64_t dims[4];       // the mask over [b, h, i, j], 1 where it broadcasts
  int64_t B, H, Sq, Dv;  // the output
};

template <typename T>
__global__ void zero_fully_masked_rows(const T* __restrict__ m, MaskRows g, T* __restrict__ o) {
  const int lane = threadIdx.x & 31;
  const int64_t row = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5;
  const int64_t rows = g.dims[0] * g.dims[1] * g.dims[2];
  if (row >= rows) return;  // the warp as a whole
  const int64_t mj = g.dims[3];
  bool live = false;
  for (int64_t j = lane; j < mj && !live; j += 32) live = twinfer::ew::load(m[row * mj + j]) != -INFINITY;
  if (__any_sync(0xffffffffu, live)) return;
  const int64_t ri = row % g.dims[2], rh = row / g.dims[2] % g.dims[1], rb = row / (g.dims[2] * g.dims[1]);
  const int64_t nb = g.dims[0] == 1 ? g.B : 1, nh = g.dims[1] == 1 ? g.H : 1, ni = g.dims[2] == 1 ? g.Sq : 1;
  for (int64_t c = 0; c < nb * nh * ni; ++c) {
    const int64_t b = g.dims[0] == 1 ? c / (nh * ni) : rb, h = g.dims[1] == 1 ? c / ni % nh : rh,
                  i = g.dims[2] == 1 ? c % ni : ri;
    T* out = o + ((b * g.H + h) * g.Sq + i) * g.Dv;
    for (int64_t d = lane; d < g.Dv; d += 32) out[d] = twinfer::ew::store<T>(0.f);
  }
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {

namespace {

constexpr unsigned kAttnTypes = ew::kF32 | ew::kF16 | ew::kBF16;
constexpr int64_t kMaxHeadDim = 256;

bool present(const KernelBuildInfo& info, size_t i) { return i < info.node().inputs.size() && info.has_input(i); }

bool attention_supports(const KernelBuildInfo& info, std::string* why) {
  auto no = [&](const std::string& w) {
    if (why) *why = w;
    return false;
  };
  const graph::Node& n = info.node();
  for (size_t i = 0; i < 3; ++i) {
    if (!present(info, i)) return no("Attention needs query, key and value");
    if (!ew::check_input_dtype(info, i, kAttnTypes, why)) return false;
    if (info.input_dtype(i) != info.input_dtype(0)) return no("Attention with inputs of different types has no CUDA kernel");
    if (info.input_shape(i).size() != 4) return no("3-D (packed heads) Attention runs on the CPU");
  }
  for (size_t i = 4; i < n.inputs.size(); ++i)
    if (info.has_input(i)) return no("Attention with a KV cache or padding lengths runs on the CPU");
  for (size_t i = 1; i < n.outputs.size(); ++i)
    if (n.outputs[i] >= 0) return no("Attention's cache and qk outputs run on the CPU");
  if (n.attr_float("softcap", 0.f) != 0.f || n.attr_int("qk_matmul_output_mode", 0) != 0)
    return no("Attention with softcap runs on the CPU");
  if (n.attr_int("left_window_size", -1) >= 0 || n.attr_int("right_window_size", -1) >= 0)
    return no("sliding-window Attention runs on the CPU");
  const Shape q = info.input_shape(0), k = info.input_shape(1), v = info.input_shape(2);
  if (k[0] != q[0] || v[0] != q[0] || k[1] != q[1] || v[1] != q[1] || v[2] != k[2] || k[3] != q[3])
    return no("Attention with grouped key heads or mismatched shapes runs on the CPU");
  if (q[3] > kMaxHeadDim || v[3] > kMaxHeadDim) return no("Attention heads wider than 256 run on the CPU");
  if (present(info, 3)) {
    const DType md = info.input_dtype(3);
    if (md != DType::kBool && md != info.input_dtype(0)) return no("an Attention mask of another float type runs on the CPU");
    const Shape m = info.input_shape(3);
    if (m.empty() || m.size() > 4) return no("an Attention mask of rank 0 or above 4 runs on the CPU");
    const int64_t full[4] = {q[0], q[1], q[2], k[2]};
    for (size_t d = 0; d < m.size(); ++d) {
      const int64_t want = full[4 - m.size() + d];
      if (m[d] != 1 && m[d] != want)  // opset 24's shorter key dim (padded with -inf) included
        return no("an Attention mask that does not broadcast onto [B, H, Sq, Sk] runs on the CPU");
    }
  }
  return true;
}

class CudaAttention final : public Kernel {
 public:
  explicit CudaAttention(const KernelBuildInfo& info) : dtype_(info.input_dtype(0)) {
    std::string why;
    if (!attention_supports(info, &why)) info.fail(ErrorKind::kUnsupportedOp, why);
    const graph::Node& n = info.node();
    const Shape q = info.input_shape(0), k = info.input_shape(1), v = info.input_shape(2);
    g_.B = q[0], g_.H = q[1], g_.Sq = q[2], g_.D = q[3], g_.Sk = k[2], g_.Dv = v[3];
    g_.q_tiles = (g_.Sq + twinfer_gpu::kRowsPerBlock - 1) / twinfer_gpu::kRowsPerBlock;
    g_.scale = n.has_attr("scale") ? n.attr_float("scale", 1.f) : 1.f / std::sqrt(static_cast<float>(g_.D));
    g_.causal = n.attr_int("is_causal", 0) != 0;
    g_.mask_kind = 0;
    if (present(info, 3)) {
      g_.mask_kind = info.input_dtype(3) == DType::kBool ? 2 : 1;
      const Shape m = info.input_shape(3);
      const int64_t full[4] = {g_.B, g_.H, g_.Sq, g_.Sk};
      Shape m4(4 - m.size(), 1);
      m4.insert(m4.end(), m.begin(), m.end());
      const Shape st = contiguous_strides(m4);
      for (int d = 0; d < 4; ++d) {
        if (m4[d] != 1 && m4[d] != full[d])
          info.fail(ErrorKind::kShape, "the mask " + shape_str(m) + " does not broadcast onto [B, H, Sq, Sk]");
        g_.mstride[d] = m4[d] == 1 ? 0 : st[d];
      }
    }
    const int64_t widest = std::max(g_.D, g_.Dv);
    dl_ = widest <= 32 ? 1 : widest <= 64 ? 2 : widest <= 128 ? 4 : 8;
    try_cudnn(info);
  }

  size_t scratch_bytes() const override {
    return sdpa_ ? round_up(static_cast<int64_t>(sdpa_->workspace_bytes()), 256) + expanded_bytes_ : 0;
  }
  void run(KernelContext& ctx) const override {
    const int64_t blocks = g_.B * g_.H * g_.q_tiles;
    if (blocks == 0) return;
    if (g_.Sk == 0) {  // no key at all: every row is all-masked
      check(cudaMemsetAsync(ctx.outputs[0].data, 0, ctx.outputs[0].bytes(), stream_of(ctx)), "cudaMemsetAsync (Attention)");
      return;
    }
    if (sdpa_) return run_cudnn(ctx);
    if (blocks > INT32_MAX) throw Error(ErrorKind::kUnsupportedOp, "Attention with more than 2^31 row blocks");
    const cudaStream_t s = stream_of(ctx);
    const size_t shared = static_cast<size_t>(twinfer_gpu::kTile * (g_.D + g_.Dv)) * sizeof(float);
    const void* mask = g_.mask_kind ? ctx.inputs[3].data : nullptr;
    ew::dispatch_typeset<kAttnTypes>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      auto go = [&](auto dl) {
        twinfer_gpu::attention_rows<T, decltype(dl)::value>
            <<<static_cast<uint32_t>(blocks), twinfer_gpu::kAttnWarps * 32, shared, s>>>(
                g_, ctx.inputs[0].as<const T>(), ctx.inputs[1].as<const T>(), ctx.inputs[2].as<const T>(), mask,
                ctx.outputs[0].as<T>());
      };
      switch (dl_) {
        case 1: go(std::integral_constant<int, 1>{}); break;
        case 2: go(std::integral_constant<int, 2>{}); break;
        case 4: go(std::integral_constant<int, 4>{}); break;
        default: go(std::integral_constant<int, 8>{}); break;
      }
    });
    check_launch("Attention launch");
  }
  const char* impl_name() const override { return name_.c_str(); }

 private:
  // cuDNN's fused attention where it applies (sdpa_plan.h); otherwise the
  // reason goes into the kernel's name and our own kernel runs.
  void try_cudnn(const KernelBuildInfo& info) {
    std::string why;
    if (dtype_ == DType::kFloat32) {
      why = "float32 (cuDNN's fused attention takes float16 and bfloat16)";
    } else if (g_.mask_kind == 2) {
      why = "a boolean mask";
    } else if (g_.mask_kind == 1 && g_.causal) {
      why = "a mask together with causal";
    } else if (g_.B * g_.H * g_.Sq * g_.Sk * g_.D * g_.Dv == 0) {
      why = "an empty dim";  // nothing to compute (run() returns early); cuDNN's checks divide by them
    } else {
      SdpaSpec spec;
      spec.B = g_.B, spec.H = g_.H, spec.Sq = g_.Sq, spec.Sk = g_.Sk, spec.D = g_.D, spec.Dv = g_.Dv;
      spec.dtype = dtype_, spec.scale = g_.scale, spec.causal = g_.causal;
      if (g_.mask_kind == 1) {
        const Shape m = info.input_shape(3);
        Shape m4(4 - m.size(), 1);
        m4.insert(m4.end(), m.begin(), m.end());
        for (int d = 0; d < 4; ++d) mask_dims_[d] = m4[d];
        spec.set_broadcast_bias(mask_dims_);
      }
      sdpa_ = make_cudnn_sdpa(spec, &why);
      if (!sdpa_ && spec.has_bias && mask_dims_[2] == 1 && mask_dims_[3] == g_.Sk && g_.Sq > 1) {
        // cuDNN may want the bias per query in memory: written out before each run.
        std::string why2;
        const Shape full{mask_dims_[0], mask_dims_[1], g_.Sq, g_.Sk};
        const int64_t dims[4] = {full[0], full[1], full[2], full[3]};
        spec.set_broadcast_bias(dims);
        sdpa_ = make_cudnn_sdpa(spec, &why2);
        if (sdpa_)
          expanded_bytes_ = static_cast<size_t>(shape_numel(full)) * dtype_size(dtype_);
        else
          why += "; with the mask per query: " + why2;
      }
    }
    name_ = sdpa_ ? "cudnn sdpa (" + sdpa_->plan_name() + (expanded_bytes_ ? "; mask written out per query)" : ")")
                  : "cuda attention (online softmax; not cuDNN: " + why + ")";
  }

  void run_cudnn(KernelContext& ctx) const {
    const cudaStream_t s = stream_of(ctx);
    char* ws = static_cast<char*>(ctx.scratch);
    const void* bias = g_.mask_kind == 1 ? ctx.inputs[3].data : nullptr;
    if (expanded_bytes_) {
      ew::dispatch_typeset<ew::kF16 | ew::kBF16>(dtype_, [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* full = reinterpret_cast<T*>(ws + round_up(static_cast<int64_t>(sdpa_->workspace_bytes()), 256));
        const int64_t n = mask_dims_[0] * mask_dims_[1] * g_.Sq * g_.Sk;
        const int grid = static_cast<int>(std::min<int64_t>((n + 255) / 256, 65535));
        twinfer_gpu::expand_mask_rows<T><<<grid, 256, 0, s>>>(static_cast<const T*>(bias), full,
                                                              mask_dims_[0] * mask_dims_[1], g_.Sq, g_.Sk);
        check_launch("Attention mask expansion launch");
        bias = full;
      });
    }
    sdpa_->run(ctx.inputs[0].data, ctx.inputs[1].data, ctx.inputs[2].data, bias, ctx.outputs[0].data, ws, s);
    if (g_.mask_kind != 1) return;
    ew::dispatch_typeset<ew::kF16 | ew::kBF16>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const twinfer_gpu::MaskRows mr{{mask_dims_[0], mask_dims_[1], mask_dims_[2], mask_dims_[3]}, g_.B, g_.H, g_.Sq,
                                     g_.Dv};
      const int64_t rows = mask_dims_[0] * mask_dims_[1] * mask_dims_[2];
      const int64_t blocks = (rows * 32 + 255) / 256;
      twinfer_gpu::zero_fully_masked_rows<T><<<static_cast<uint32_t>(blocks), 256, 0, s>>>(
          ctx.inputs[3].as<const T>(), mr, ctx.outputs[0].as<T>());
      check_launch("Attention masked-row launch");
    });
  }

  DType dtype_;
  twinfer_gpu::AttnGeom g_{};
  int dl_ = 2;
  std::shared_ptr<const SdpaPlan> sdpa_;
  int64_t mask_dims_[4] = {1, 1, 1, 1};
  size_t expanded_bytes_ = 0;  // the mask written out per query, after cuDNN's workspace
  std::string name_;
};


}  // namespace

TWINFER_REGISTER_KERNEL("Attention", Backend::kCUDA, 0, attention_supports, make_kernel<CudaAttention>);
TWINFER_REGISTER_KERNEL("Attention", Backend::kCUDA, 0, attention_supports, make_kernel<CudaAttention>, kTwinferDomain);

}  // namespace twinfer::cuda
