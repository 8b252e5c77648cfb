// Row kernels on CUDA: Softmax / LogSoftmax, LayerNormalization, the ten
// Reduce ops over trailing axes, GlobalAveragePool / GlobalMaxPool. One block per
// row (a grid-stride loop over rows), the row's elements strided over the
// block's threads, statistics accumulated in fp32 (sums in fp64, as the CPU
// kernels do), block reductions by warp shuffles: every thread of the block
// reaches every reduction (no early return; CUDA_GUIDE.md section 3).
// Reduce ops over a block of middle axes ([outer, len, inner], e.g. axes
// [1, 2] of an NHWC tensor: the channels-last global pools) go by columns
// instead (reduce_cols); over axes that are no one block, as rows of a copy
// with the reduced axes moved innermost (ReducePlan). Reduce ops also take
// double, computed in double.
#include <cfloat>
#include <type_traits>

#include "backends/cuda/block_reduce.cuh"
#include "backends/cuda/channels_last_index.h"
#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/kernel_util.h"
#include "backends/cuda/strided_gather.cuh"
#include "ops/nn/softmax.h"
#include "ops/reduce/reduce_axes.h"

namespace twinfer_gpu {

// Softmax over `len` elements `inner` apart, rows = outer * inner.
template <typename T>
__global__ void softmax_rows(int64_t rows, int64_t len, int64_t inner, const T* __restrict__ x, T* __restrict__ y,
                             bool log) {
  __shared__ float sf[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t o = r / inner, j = r - o * inner;
    const T* xr = x + o * len * inner + j;
    T* yr = y + o * len * inner + j;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) m = fmaxf(m, twinfer::ew::load(xr[i * inner]));
    m = block_reduce(m, MaxOp{}, sf, -INFINITY);
    float s = 0.f;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) s += expf(twinfer::ew::load(xr[i * inner]) - m);
    s = block_reduce(s, SumOp{}, sf, 0.f);
    const float ls = m + logf(s), inv = 1.f / s;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
      const float v = twinfer::ew::load(xr[i * inner]);
      yr[i * inner] = twinfer::ew::store<T>(log ? v - ls : expf(v - m) * inv);
    }
  }
}

// Softmax of contiguous rows of len <= 32 * K: a warp per row, the row in
// registers (K values a lane), the reductions by shuffles alone. The math
// of softmax_rows (NaN-ignoring max, float sum); attention's rows (ViT:
// 197 long, 150k of them at batch 64) spent most of their time in the
// block version's barriers.
template <typename T, int K>
__global__ void softmax_warp_rows(int64_t rows, int len, const T* __restrict__ x, T* __restrict__ y, bool log) {
  const int lane = threadIdx.x & 31;
  const int64_t per_block = blockDim.x >> 5, warps = static_cast<int64_t>(gridDim.x) * per_block;
  for (int64_t r = blockIdx.x * per_block + (threadIdx.x >> 5); r < rows; r += warps) {
    const T* xr = x + r * len;
    T* yr = y + r * len;
    float v[K];
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int i = lane + 32 * k;
      v[k] = i < len ? twinfer::ew::load(xr[i]) : -INFINITY;
      m = fmaxf(m, v[k]);
    }
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < K; ++k)
      if (lane + 32 * k < len) s += expf(v[k] - m);
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    const float ls = m + logf(s), inv = 1.f / s;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int i = lane + 32 * k;
      if (i < len) yr[i] = twinfer::ew::store<T>(log ? v[k] - ls : expf(v[k] - m) * inv);
    }
  }
}

// LayerNormalization of contiguous rows of `d`: two passes (mean, then the
// squared deviations), as the CPU's norm_stats.h.
template <typename T>
__global__ void layernorm_rows(int64_t rows, int64_t d, const T* __restrict__ x, const T* __restrict__ scale,
                               const T* __restrict__ bias, float eps, T* __restrict__ y, float* __restrict__ mean_out,
                               float* __restrict__ inv_out) {
  __shared__ float sf[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * d;
    T* yr = y + r * d;
    float mean, m2;
    block_mean_m2(xr, d, sf, &mean, &m2);
    const float inv = rsqrtf(m2 / static_cast<float>(d) + eps);
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      float v = (twinfer::ew::load(xr[i]) - mean) * inv * twinfer::ew::load(scale[i]);
      if (bias) v += twinfer::ew::load(bias[i]);
      yr[i] = twinfer::ew::store<T>(v);
    }
    if (threadIdx.x == 0) {
      if (mean_out) mean_out[r] = mean;
      if (inv_out) inv_out[r] = inv;
    }
  }
}

// LayerNormalization of rows of d <= 32 * K: a warp per row, the row in
// registers, the two passes (mean, squared deviations) from them by shuffles
// alone (BERT's and ViT's 768-wide rows spent their time in the block
// version's barriers).
template <typename T, int K>
__global__ void layernorm_warp_rows(int64_t rows, int d, const T* __restrict__ x, const T* __restrict__ scale,
                                    const T* __restrict__ bias, float eps, T* __restrict__ y,
                                    float* __restrict__ mean_out, float* __restrict__ inv_out) {
  const int lane = threadIdx.x & 31;
  const int64_t per_block = blockDim.x >> 5, warps = static_cast<int64_t>(gridDim.x) * per_block;
  for (int64_t r = blockIdx.x * per_block + (threadIdx.x >> 5); r < rows; r += warps) {
    const T* xr = x + r * d;
    T* yr = y + r * d;
    float v[K];
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int i = lane + 32 * k;
      v[k] = i < d ? twinfer::ew::load(xr[i]) : 0.f;
      s += v[k];
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    const float mean = s / static_cast<float>(d);
    float q = 0.f;
#pragma unroll
    for (int k = 0; k < K; ++k)
      if (lane + 32 * k < d) q += (v[k] - mean) * (v[k] - mean);
    for (int o = 16; o > 0; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
    const float inv = rsqrtf(q / static_cast<float>(d) + eps);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int i = lane + 32 * k;
      if (i >= d) continue;
      float t = (v[k] - mean) * inv * twinfer::ew::load(scale[i]);
      if (bias) t += twinfer::ew::load(bias[i]);
      yr[i] = twinfer::ew::store<T>(t);
    }
    if (lane == 0) {
      if (mean_out) mean_out[r] = mean;
      if (inv_out) inv_out[r] = inv;
    }
  }
}

// The Reduce ops as kinds, with the CPU's arithmetic (ops/reduce/reduce_ops.h):
// Max / Min in the compute type with NaN propagated; the others accumulate
// in double: the element's contribution (reduce_map), added (multiplied for
// Prod), then finished (reduce_fin). LogSumExp first finds the row's maximum
// (NaN ignored, 0 when not finite) and sums exp(x - max).
enum ReduceKind : int { kRSum, kRMean, kRMax, kRMin, kRL1, kRL2, kRSumSquare, kRLogSum, kRLogSumExp, kRProd };

__device__ __forceinline__ bool max_like(int kind) { return kind == kRMax || kind == kRMin; }

template <typename T>
__device__ __forceinline__ double reduce_map(int kind, T x, double shift) {
  const double v = static_cast<double>(twinfer::ew::load(x));
  switch (kind) {
    case kRL1: return fabs(v);
    case kRL2:
    case kRSumSquare: return v * v;
    case kRLogSumExp:
      // float inputs: exp in float, as the CPU computes each term.
      if (std::is_same<decltype(twinfer::ew::load(x)), float>::value) return expf(static_cast<float>(v - shift));
      return exp(v - shift);
    default: return v;
  }
}

__device__ __forceinline__ double reduce_fin(int kind, double a, int64_t len, double shift) {
  switch (kind) {
    case kRMean: return a / static_cast<double>(len);
    case kRL2: return sqrt(a);
    case kRLogSum: return log(a);
    case kRLogSumExp: return log(a) + shift;
    default: return a;
  }
}

struct ProdOp {
  __device__ double operator()(double a, double b) const { return a * b; }
};

__device__ __forceinline__ double finite_or_zero(double m) { return isfinite(m) ? m : 0.0; }

// Reductions of contiguous rows of `len`. Max / Min compare in C: float
// (double for double inputs).
template <typename T>
__global__ void reduce_rows(int64_t rows, int64_t len, const T* __restrict__ x, T* __restrict__ y, int kind) {
  using C = decltype(twinfer::ew::load(x[0]));
  __shared__ double sd[32];
  __shared__ float sf[32];
  __shared__ C sc[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * len;
    if (!max_like(kind)) {
      double shift = 0.0;
      if (kind == kRLogSumExp) {
        double m = -INFINITY;
        for (int64_t i = threadIdx.x; i < len; i += blockDim.x)
          m = fmax(m, static_cast<double>(twinfer::ew::load(xr[i])));
        shift = finite_or_zero(block_reduce(m, MaxOp{}, sd, -static_cast<double>(INFINITY)));
      }
      const bool prod = kind == kRProd;
      double s = prod ? 1.0 : 0.0;
      for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
        const double v = reduce_map(kind, xr[i], shift);
        s = prod ? s * v : s + v;
      }
      s = prod ? block_reduce(s, ProdOp{}, sd, 1.0) : block_reduce(s, SumOp{}, sd, 0.0);
      if (threadIdx.x == 0) y[r] = twinfer::ew::store<T>(reduce_fin(kind, s, len, shift));
    } else {
      // NaN propagates through Max / Min, as the CPU's reduce_ops.h does.
      const C lo = -INFINITY, hi = INFINITY;
      C m = kind == kRMax ? lo : hi;
      bool nan = false;
      for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
        const C v = twinfer::ew::load(xr[i]);
        nan = nan || v != v;
        m = kind == kRMax ? max_of(m, v) : min_of(m, v);
      }
      m = kind == kRMax ? block_reduce(m, MaxOp{}, sc, lo) : block_reduce(m, MinOp{}, sc, hi);
      const float any_nan = block_reduce(nan ? 1.f : 0.f, MaxOp{}, sf, 0.f);
      if (threadIdx.x == 0) y[r] = twinfer::ew::store<T>(any_nan > 0.f ? NAN : m);
    }
  }
}

// Reductions over the middle dim of [outer, len, inner] with inner > 1: a
// column (o, j) reads len elements `inner` apart. A block is kColWidth
// consecutive columns (consecutive j: a warp's loads coalesce along inner)
// by kColSplit threads that share out len, so short column counts (batch 1)
// still fill the GPU; the partials meet in shared memory in a fixed order.
// kind and the arithmetic as reduce_rows: sums in double, max / min in
// float with NaN propagated, an empty mean NaN (0 / 0); LogSumExp's maximum
// first, through the same shared partials.
constexpr int kColWidth = 32, kColSplit = 8;

template <typename T>
__global__ void reduce_cols(int64_t outer, int64_t len, int64_t inner, const T* __restrict__ x, T* __restrict__ y,
                            int kind) {
  using C = decltype(twinfer::ew::load(x[0]));  // Max / Min's: float, or double
  __shared__ double sd[kColSplit][kColWidth];
  __shared__ C sf[kColSplit][kColWidth];
  __shared__ bool sn[kColSplit][kColWidth];
  const int64_t cols = outer * inner;
  const int tx = threadIdx.x, ty = threadIdx.y;
  // The loop bound is the same for the whole block, so every thread reaches
  // both barriers; columns past the end only add neutral partials.
  for (int64_t c0 = static_cast<int64_t>(blockIdx.x) * kColWidth; c0 < cols;
       c0 += static_cast<int64_t>(gridDim.x) * kColWidth) {
    const int64_t col = c0 + tx;
    const bool live = col < cols;
    const int64_t o = live ? col / inner : 0, j = live ? col - o * inner : 0;
    const T* xc = x + o * len * inner + j;
    double shift = 0.0;  // LogSumExp's
    if (!max_like(kind)) {
      if (kind == kRLogSumExp) {  // the column's maximum first (the kind is the block's: no divergent barrier)
        double m = -INFINITY;
        if (live)
          for (int64_t k = ty; k < len; k += kColSplit) m = fmax(m, static_cast<double>(twinfer::ew::load(xc[k * inner])));
        sd[ty][tx] = m;
        __syncthreads();
        m = -INFINITY;
        for (int r = 0; r < kColSplit; ++r) m = fmax(m, sd[r][tx]);
        shift = finite_or_zero(m);
        __syncthreads();  // every thread has read the maxima before the sums overwrite them
      }
      const bool prod = kind == kRProd;
      double s = prod ? 1.0 : 0.0;
      if (live)
        for (int64_t k = ty; k < len; k += kColSplit) {
          const double v = reduce_map(kind, xc[k * inner], shift);
          s = prod ? s * v : s + v;
        }
      sd[ty][tx] = s;
    } else {
      C m = kind == kRMax ? -INFINITY : INFINITY;
      bool nan = false;
      if (live)
        for (int64_t k = ty; k < len; k += kColSplit) {
          const C v = twinfer::ew::load(xc[k * inner]);
          nan = nan || v != v;
          m = kind == kRMax ? max_of(m, v) : min_of(m, v);
        }
      sf[ty][tx] = m;
      sn[ty][tx] = nan;
    }
    __syncthreads();
    if (ty == 0 && live) {
      if (!max_like(kind)) {
        const bool prod = kind == kRProd;
        double s = sd[0][tx];
        for (int r = 1; r < kColSplit; ++r) s = prod ? s * sd[r][tx] : s + sd[r][tx];
        y[col] = twinfer::ew::store<T>(reduce_fin(kind, s, len, shift));
      } else {
        C m = sf[0][tx];
        bool nan = sn[0][tx];
        for (int r = 1; r < kColSplit; ++r) {
          m = kind == kRMax ? max_of(m, sf[r][tx]) : min_of(m, sf[r][tx]);
          nan = nan || sn[r][tx];
        }
        y[col] = twinfer::ew::store<T>(nan ? NAN : m);
      }
    }
    __syncthreads();  // the partials are written again in the next round
  }
}

// Bool ReduceMax / ReduceMin (opset 20): any / all over the middle dim of
// [outer, len, inner], a thread per output. Bool masks reduce over short
// lengths, so one thread walking its column is enough; an empty reduction
// gives the identity (false for any, true for all), as the CPU's.
__global__ void reduce_bool(int64_t outer, int64_t len, int64_t inner, const bool* __restrict__ x,
                            bool* __restrict__ y, bool all) {
  const int64_t n = outer * inner;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < n;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = c / inner, j = c - o * inner;
    const bool* xc = x + o * len * inner + j;
    bool r = all;
    for (int64_t k = 0; k < len && r == all; ++k) r = xc[k * inner];  // the first element that decides it
    y[c] = r;
  }
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {
namespace {

constexpr unsigned kRowTypes = ew::kF32 | ew::kF16 | ew::kBF16;
// Reduce* and the global pools also take double (computed in double).
constexpr unsigned kReduceTypes = kRowTypes | ew::kF64;
// ReduceSum also takes int32 (summed in double: exact below 2^53), what
// onnxruntime's optimizer counts an attention mask's keys with.
constexpr unsigned kReduceSumTypes = kReduceTypes | ew::kI32;

// f(std::integral_constant<int, K>) with K the values per lane a warp-per-row
// kernel needs for rows of len <= 1024 (a power of two, 1 to 32).
template <typename F>
void with_values_per_lane(int len, F&& f) {
  if (len <= 32) f(std::integral_constant<int, 1>{});
  else if (len <= 64) f(std::integral_constant<int, 2>{});
  else if (len <= 128) f(std::integral_constant<int, 4>{});
  else if (len <= 256) f(std::integral_constant<int, 8>{});
  else if (len <= 512) f(std::integral_constant<int, 16>{});
  else f(std::integral_constant<int, 32>{});
}

uint32_t row_blocks(int64_t rows) { return static_cast<uint32_t>(std::min<int64_t>(std::max<int64_t>(rows, 1), 1 << 20)); }

bool row_dtype_ok(const KernelBuildInfo& info, std::string* why) {
  return ew::check_input_dtype(info, 0, kRowTypes, why);
}

// ---- Softmax / LogSoftmax ----------------------------------------------------

class CudaSoftmax final : public Kernel {
 public:
  explicit CudaSoftmax(const KernelBuildInfo& info) : g_(nn::softmax_geom(info)), dtype_(info.input_dtype(0)) {}
  void run(KernelContext& ctx) const override {
    const int64_t rows = g_.outer * g_.inner;
    if (rows == 0 || g_.len == 0) return;
    const cudaStream_t s = stream_of(ctx);
    ew::dispatch_typeset<kRowTypes>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = ctx.inputs[0].as<const T>();
      T* y = ctx.outputs[0].as<T>();
      if (g_.inner == 1 && g_.len <= 1024) {  // a warp per row, four rows a block
        const uint32_t blocks = row_blocks((rows + 3) / 4);
        const int len = static_cast<int>(g_.len);
        with_values_per_lane(len, [&](auto k) {
          twinfer_gpu::softmax_warp_rows<T, decltype(k)::value><<<blocks, 128, 0, s>>>(rows, len, x, y, g_.log);
        });
      } else {
        twinfer_gpu::softmax_rows<<<row_blocks(rows), twinfer_gpu::kRowThreads, 0, s>>>(rows, g_.len, g_.inner, x, y,
                                                                                      g_.log);
      }
    });
    check_launch("Softmax launch");
  }
  const char* impl_name() const override { return "cuda rows"; }

 private:
  nn::SoftmaxGeom g_;
  DType dtype_;
};

// ---- LayerNormalization ------------------------------------------------------

struct LayerNormGeom {
  int64_t rows = 1, d = 1;
  float eps = 1e-5f;
};

LayerNormGeom layernorm_geom(const KernelBuildInfo& info) {
  const Shape x = info.input_shape(0);
  const int64_t rank = static_cast<int64_t>(x.size());
  int64_t axis = info.node().attr_int("axis", -1);
  if (rank < 1 || axis < -rank || axis >= rank) info.fail(ErrorKind::kShape, "axis out of range");
  if (axis < 0) axis += rank;
  LayerNormGeom g;
  for (int64_t i = 0; i < axis; ++i) g.rows *= x[i];
  for (int64_t i = axis; i < rank; ++i) g.d *= x[i];
  g.eps = info.node().attr_float("epsilon", 1e-5f);
  return g;
}

bool layernorm_supports(const KernelBuildInfo& info, std::string* why) {
  if (!row_dtype_ok(info, why)) return false;
  const LayerNormGeom g = layernorm_geom(info);
  for (size_t i = 1; i < 3; ++i)
    if (info.has_input(i) && shape_numel(info.input_shape(i)) != g.d) {
      if (why) *why = "LayerNormalization scale/bias broadcast has no CUDA kernel (they must hold one value per element)";
      return false;
    }
  if (info.node().attr_int("stash_type", 1) != 1) {
    if (why) *why = "LayerNormalization stash_type other than float32 has no CUDA kernel";
    return false;
  }
  return true;
}

class CudaLayerNorm final : public Kernel {
 public:
  explicit CudaLayerNorm(const KernelBuildInfo& info)
      : g_(layernorm_geom(info)), dtype_(info.input_dtype(0)), has_bias_(info.has_input(2)) {}
  void run(KernelContext& ctx) const override {
    if (g_.rows == 0 || g_.d == 0) return;
    const cudaStream_t s = stream_of(ctx);
    float* mean = ctx.outputs.size() > 1 ? ctx.outputs[1].as<float>() : nullptr;
    float* inv = ctx.outputs.size() > 2 ? ctx.outputs[2].as<float>() : nullptr;
    ew::dispatch_typeset<kRowTypes>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = ctx.inputs[0].as<const T>();
      const T* scale = ctx.inputs[1].as<const T>();
      const T* bias = has_bias_ ? ctx.inputs[2].as<const T>() : nullptr;
      T* y = ctx.outputs[0].as<T>();
      if (g_.d <= 1024) {  // a warp per row, four rows a block
        const uint32_t blocks = row_blocks((g_.rows + 3) / 4);
        const int d = static_cast<int>(g_.d);
        with_values_per_lane(d, [&](auto k) {
          twinfer_gpu::layernorm_warp_rows<T, decltype(k)::value>
              <<<blocks, 128, 0, s>>>(g_.rows, d, x, scale, bias, g_.eps, y, mean, inv);
        });
      } else {
        twinfer_gpu::layernorm_rows<<<row_blocks(g_.rows), twinfer_gpu::kRowThreads, 0, s>>>(
            g_.rows, g_.d, x, scale, bias, g_.eps, y, mean, inv);
      }
    });
    check_launch("LayerNormalization launch");
  }
  const char* impl_name() const override { return "cuda rows"; }

 private:
  LayerNormGeom g_;
  DType dtype_;
  bool has_bias_;
};

// ---- Reduce* over trailing or middle axes, global pools -----------------------

int reduce_kind(const std::string& op) {
  using namespace twinfer_gpu;
  if (op == "ReduceSum") return kRSum;
  if (op == "ReduceMean" || op == "GlobalAveragePool") return kRMean;
  if (op == "ReduceMax" || op == "GlobalMaxPool") return kRMax;
  if (op == "ReduceMin") return kRMin;
  if (op == "ReduceL1") return kRL1;
  if (op == "ReduceL2") return kRL2;
  if (op == "ReduceSumSquare") return kRSumSquare;
  if (op == "ReduceLogSum") return kRLogSum;
  if (op == "ReduceLogSumExp") return kRLogSumExp;
  if (op == "ReduceProd") return kRProd;
  return -1;
}

// How a reduction runs: as [outer, len, inner] over x itself
// (channels_last_index.h's reduce_block; inner == 1 reduces trailing dims,
// rows of len, inner > 1 a block in the middle, columns), or, where the
// reduced dims are not one block (axes [0, 2, 3] of NCHW:
// MeanVarianceNormalization's), gathered first into scratch with the kept
// dims outermost and the reduced ones innermost, then as rows: the kept
// dims stay in their order, so the rows come out in the output's order. A
// no-op reduction (empty axes with noop_with_empty_axes) is a copy.
// supports() and the kernel share it.
struct ReducePlan {
  int64_t outer = 1, len = 1, inner = 1;
  bool copy = false;                 // the no-op
  bool gather = false;               // x gathered into scratch first
  int64_t gather_n = 0;              // x's elements
  ew::OffsetCalc<1> gather_src;      // scratch element -> x element
};

bool reduce_plan(const KernelBuildInfo& info, ReducePlan* p, std::string* why) {
  const Shape in = info.input_shape(0);
  const int64_t rank = static_cast<int64_t>(in.size());
  std::vector<char> red(rank, 0);
  const std::string& op = info.node().op_type;
  if (op == "GlobalAveragePool" || op == "GlobalMaxPool") {
    for (int64_t d = 2; d < rank; ++d) red[d] = 1;
  } else {
    bool noop = false, known = true;
    red = reduce::reduced_dims(info, rank, &noop, &known);
    if (!known) {
      if (why) *why = "axes computed at run time";
      return false;
    }
    if (noop) {
      // A set of one is x itself for these; SumSquare, L1, L2 and LogSum
      // still map it (x*x, |x|, log x): rows of one element each (a block
      // per element: slow, but an op nobody times).
      if (op == "ReduceSum" || op == "ReduceMean" || op == "ReduceMax" || op == "ReduceMin" || op == "ReduceProd" ||
          op == "ReduceLogSumExp") {
        p->copy = true;
      } else {
        p->outer = shape_numel(in);
        p->len = p->inner = 1;
      }
      return true;
    }
  }
  if (reduce_block(in, red, &p->outer, &p->len, &p->inner, nullptr)) return true;
  std::vector<int64_t> dims, strides;
  reduce_gather(in, red, &dims, &strides, &p->outer, &p->len);
  p->inner = 1;
  if (!ew::offsets_for(dims, strides, &p->gather_src)) {
    if (why) *why = "a reduction over dims that are not one block, of more than " + std::to_string(ew::kMaxOffsetDims) +
                    " dims, has no CUDA kernel";
    return false;
  }
  p->gather = true;
  p->gather_n = shape_numel(in);
  return true;
}

// Bool inputs: ReduceMax and ReduceMin only (any / all).
bool bool_minmax(const KernelBuildInfo& info) {
  const std::string& op = info.node().op_type;
  return info.input_dtype(0) == DType::kBool && (op == "ReduceMax" || op == "ReduceMin");
}

bool reduce_supports(const KernelBuildInfo& info, std::string* why) {
  const int kind = reduce_kind(info.node().op_type);
  const unsigned types = kind == twinfer_gpu::kRSum ? kReduceSumTypes : kReduceTypes;
  if (!bool_minmax(info) && !ew::check_input_dtype(info, 0, types, why)) return false;
  if (kind < 0) return false;
  ReducePlan p;
  return reduce_plan(info, &p, why);
}

class CudaReduce final : public Kernel {
 public:
  explicit CudaReduce(const KernelBuildInfo& info)
      : dtype_(info.input_dtype(0)), kind_(reduce_kind(info.node().op_type)) {
    std::string why;
    if (!reduce_plan(info, &p_, &why)) info.fail(ErrorKind::kUnsupportedOp, why);
  }
  size_t scratch_bytes() const override {
    return p_.gather ? static_cast<size_t>(p_.gather_n) * dtype_size(dtype_) : 0;
  }
  void run(KernelContext& ctx) const override {
    const cudaStream_t s = stream_of(ctx);
    if (p_.copy) {
      const size_t bytes = ctx.outputs[0].bytes();
      if (bytes) check(cudaMemcpyAsync(ctx.outputs[0].data, ctx.inputs[0].data, bytes, cudaMemcpyDeviceToDevice, s),
                       "no-op reduction copy");
      return;
    }
    const int64_t cols = p_.outer * p_.inner;  // outputs
    if (cols == 0) return;
    if (dtype_ == DType::kBool) {
      const bool* x = gathered(ctx.inputs[0].as<const bool>(), ctx.scratch, s);
      const ew::LaunchConfig lc = ew::elementwise_launch(cols);
      twinfer_gpu::reduce_bool<<<lc.blocks, lc.threads, 0, s>>>(p_.outer, p_.len, p_.inner, x,
                                                                 ctx.outputs[0].as<bool>(), kind_ == twinfer_gpu::kRMin);
      check_launch("bool reduction launch");
      return;
    }
    ew::dispatch_typeset<kReduceSumTypes>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = gathered(ctx.inputs[0].as<const T>(), ctx.scratch, s);
      T* y = ctx.outputs[0].as<T>();
      if (p_.inner == 1) {
        twinfer_gpu::reduce_rows<<<row_blocks(p_.outer), twinfer_gpu::kRowThreads, 0, s>>>(p_.outer, p_.len, x, y,
                                                                                          kind_);
      } else {
        const dim3 block(twinfer_gpu::kColWidth, twinfer_gpu::kColSplit);
        twinfer_gpu::reduce_cols<<<row_blocks((cols + twinfer_gpu::kColWidth - 1) / twinfer_gpu::kColWidth), block, 0,
                                   s>>>(p_.outer, p_.len, p_.inner, x, y, kind_);
      }
    });
    check_launch("reduction launch");
  }
  const char* impl_name() const override {
    if (p_.copy) return "cuda copy (no-op reduction)";
    if (dtype_ == DType::kBool) return p_.gather ? "cuda gather + bool any/all" : "cuda bool any/all";
    if (p_.gather) return "cuda gather + rows";
    return p_.inner == 1 ? "cuda rows" : "cuda columns";
  }

 private:
  // x itself, or x gathered into `scratch` with the reduced dims innermost (ReducePlan).
  template <typename T>
  const T* gathered(const T* x, void* scratch, cudaStream_t s) const {
    if (!p_.gather) return x;
    T* moved = static_cast<T*>(scratch);
    const ew::LaunchConfig lc = ew::elementwise_launch(p_.gather_n);
    if (lc.blocks) twinfer_gpu::gather_copy<<<lc.blocks, lc.threads, 0, s>>>(p_.gather_n, p_.gather_src, 0, x, moved);
    return moved;
  }

  DType dtype_;
  int kind_;
  ReducePlan p_;
};

}  // namespace

TWINFER_REGISTER_KERNEL("Softmax", Backend::kCUDA, 0, row_dtype_ok, make_kernel<CudaSoftmax>);
TWINFER_REGISTER_KERNEL("LogSoftmax", Backend::kCUDA, 0, row_dtype_ok, make_kernel<CudaSoftmax>);
TWINFER_REGISTER_KERNEL("LayerNormalization", Backend::kCUDA, 0, layernorm_supports, make_kernel<CudaLayerNorm>);
TWINFER_REGISTER_KERNEL("ReduceSum", Backend::kCUDA, 0, reduce_supports, make_kernel<CudaReduce>);
TWINFER_REGISTER_KERNEL("ReduceMean", Backend::kCUDA, 0, reduce_supports, make_kernel<CudaReduce>);
TWINFER_REGISTER_KERNEL("ReduceMax", Backend::kCUDA, 0, reduce_supports, make_kernel<CudaReduce>);
TWINFER_REGISTER_KERNEL("ReduceMin", Backend::kCUDA, 0, reduce_supports, make_kernel<CudaReduce>);
TWINFER_REGISTER_KERNEL("ReduceL1", Backend::kCUDA, 0, reduce_supports, make_kernel<CudaReduce>);
TWINFER_REGISTER_KERNEL("ReduceL2", Backend::kCUDA, 0, reduce_supports, make_kernel<CudaReduce>);
TWINFER_REGISTER_KERNEL("ReduceSumSquare", Backend::kCUDA, 0, reduce_supports, make_kernel<CudaReduce>);
TWINFER_REGISTER_KERNEL("ReduceLogSum", Backend::kCUDA, 0, reduce_supports, make_kernel<CudaReduce>);
TWINFER_REGISTER_KERNEL("ReduceLogSumExp", Backend::kCUDA, 0, reduce_supports, make_kernel<CudaReduce>);
TWINFER_REGISTER_KERNEL("ReduceProd", Backend::kCUDA, 0, reduce_supports, make_kernel<CudaReduce>);
TWINFER_REGISTER_KERNEL("GlobalAveragePool", Backend::kCUDA, 0, reduce_supports, make_kernel<CudaReduce>);
TWINFER_REGISTER_KERNEL("GlobalMaxPool", Backend::kCUDA, 0, reduce_supports, make_kernel<CudaReduce>);

}  // namespace twinfer::cuda
