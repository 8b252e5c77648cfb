// Attention on CUDA (ONNX Attention, opsets 23-25, and com.twinfer::Attention,
// which graph/passes/fuse_attention.cc writes for the spelled-out form):
// 4-D [B, H, S, D] or 3-D [B, S, H * D] (packed heads, q_num_heads /
// kv_num_heads) query, key and value, read in place as strided [B, H, S, D]
// views; grouped-query heads (key head = query head / (Hq / Hkv)); an
// optional additive (float) or boolean mask broadcast onto [B, Hq, Sq, S]
// (a shorter key dim masks the keys after it); causal masking and sliding
// windows aligned bottom-right (the query offset: the past length, or
// nonpad_kv_seqlen[b] - Sq); padding lengths (keys at or after
// nonpad_kv_seqlen[b] masked; a length outside [0, S] sets the error flag);
// the scale attribute (1/sqrt(D) without it); softcap (cap * tanh(s / cap)
// on the scaled scores, before the mask is added, as the CPU kernel and the
// ONNX reference do); an in-op KV cache (present = concat(past, new) along
// the sequence, written by a copy kernel into the present outputs or scratch,
// then attention over present); the qk_matmul_output output in its four
// modes (0/1: the softcapped scores, 2: plus the mask, 3: the softmax, done
// by a second kernel over the rows written in mode 2's form). The rules for
// offsets and hidden keys are the CPU kernel's (ops/transformer/attention_math.h).
//
// One pass, the scores never in memory: a block takes kRowsPerBlock query
// rows of one (b, h); key and value rows go through shared memory kTile at a
// time (float), and each warp keeps its rows' running max, sum and weighted
// value sum in registers (the online softmax), lane l holding dims l, l + 32,
// ... A row whose keys are all masked gives zeros, as the CPU kernel (and
// ONNX's errata) does. Statistics and sums in float.
//
// float16 and bfloat16 go to cuDNN's fused flash attention first (tensor
// cores; sdpa_plan.h), without a mask, causal, or with an additive or
// boolean mask (the boolean one written out as 0 / -inf first),
// and only in the plain case (4-D, none of the extras above; grouped key
// heads too, cuDNN's GQA); what cuDNN refuses (and float32, a mask with
// causal) runs the kernel above. Where cuDNN takes the layer, both run at
// plan build on zeroed operands and the faster is kept (cuDNN's plan has a
// fixed cost that small problems, a decoder's one query row or a test's
// handful, do not earn back); TWINFER_ATTENTION=cudnn|ours forces one.
// kernel_report's kernel name says which, why, and both times.
//
// com.twinfer::Attention may carry views (ops/transformer/attention_views.h,
// written by graph/passes/attention_views.cc): q, k and v read at their
// offsets and strides in the tensors the exporter's copies started from, the
// output written at its strides into the tensor its copies ended in. Both
// paths take them as they are (cuDNN's tensors have strides); the kernel
// name ends in "[strided in place]".
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cuda/build_stream.h"
#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/error_flag.h"
#include "backends/cuda/kernel_util.h"
#include "backends/cuda/sdpa_plan.h"
#include "graph/domains.h"
#include "ops/transformer/attention_math.h"
#include "ops/transformer/attention_views.h"

namespace twinfer_gpu {

constexpr int kAttnWarps = 4;
constexpr int kRowsPerWarp = 4;
constexpr int kRowsPerBlock = kAttnWarps * kRowsPerWarp;
constexpr int kTile = 16;  // key rows staged at a time

struct AttnGeom {
  int64_t B, H, Hkv, Sq, Sk, D, Dv;  // Sk: the keys attended (past + new)
  int64_t q_tiles;                   // blocks per (b, h)
  twinfer::tx::AttnStrides qs, ks, vs, os;  // over (b, h, s) of q, k, v (or present) and the output
  int64_t mstride[4];        // mask strides over [b, h, i, j] (0: broadcast); unused without a mask
  int64_t mask_k;            // keys the mask covers; later ones are masked
  int mask_kind;             // 0 none, 1 float (the data's type), 2 bool
  bool causal;
  bool has_past;
  int64_t past;              // past keys (the query offset with a cache)
  int64_t left, right;       // sliding window (-1: unbounded)
  int nonpad_kind;           // 0 none, 1 int32, 2 int64 padding lengths
  int qk_mode;               // -1: no qk output; else qk_matmul_output_mode (3 written as 2, then softmaxed)
  float scale;
  float softcap;             // > 0: cap * tanh(s / cap)
};

template <typename T, int DL>  // DL: dims per lane (D and Dv <= 32 * DL)
__global__ void __launch_bounds__(kAttnWarps * 32)
    attention_rows(AttnGeom g, const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                   const void* __restrict__ mask, const void* __restrict__ nonpad, T* __restrict__ o,
                   T* __restrict__ qk, int* __restrict__ error) {
  extern __shared__ float sh[];  // [kTile][D] keys, then [kTile][Dv] values
  float* kt = sh;
  float* vt = sh + kTile * g.D;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t bh = blockIdx.x / g.q_tiles;
  const int64_t row0 = (blockIdx.x % g.q_tiles) * kRowsPerBlock + warp * kRowsPerWarp;
  const int64_t b = bh / g.H, h = bh % g.H, kh = h / (g.H / g.Hkv);
  const T* qb = q + b * g.qs.b + h * g.qs.h;
  const T* kb = k + b * g.ks.b + kh * g.ks.h;
  const T* vb = v + b * g.vs.b + kh * g.vs.h;
  T* ob = o + b * g.os.b + h * g.os.h;

  int64_t valid = g.Sk, npb = 0;  // keys not padding; this batch's padding length
  if (g.nonpad_kind) {
    npb = g.nonpad_kind == 1 ? static_cast<const int32_t*>(nonpad)[b] : static_cast<const int64_t*>(nonpad)[b];
    if (npb < 0 || npb > g.Sk) {
      if (threadIdx.x == 0) *error = twinfer::cuda::kIndexOutOfRange;
      npb = npb < 0 ? 0 : g.Sk;
    }
    valid = npb;
  }
  const int64_t off = twinfer::tx::attn_query_offset(g.has_past, g.past, g.nonpad_kind != 0, npb, g.Sq);

  float qr[kRowsPerWarp][DL], acc[kRowsPerWarp][DL], mx[kRowsPerWarp], sum[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t i = row0 + r;
    mx[r] = -INFINITY;
    sum[r] = 0.f;
#pragma unroll
    for (int c = 0; c < DL; ++c) {
      const int64_t d = lane + 32 * c;
      qr[r][c] = (i < g.Sq && d < g.D) ? twinfer::ew::load(qb[i * g.qs.s + d]) : 0.f;
      acc[r][c] = 0.f;
    }
  }
  for (int64_t j0 = 0; j0 < g.Sk; j0 += kTile) {
    const int n = static_cast<int>(g.Sk - j0 < kTile ? g.Sk - j0 : kTile);
    __syncthreads();  // the previous tile is read by every warp
    for (int64_t e = threadIdx.x; e < n * g.D; e += blockDim.x) {
      const int64_t t = e / g.D;
      kt[e] = twinfer::ew::load(kb[(j0 + t) * g.ks.s + (e - t * g.D)]);
    }
    for (int64_t e = threadIdx.x; e < n * g.Dv; e += blockDim.x) {
      const int64_t t = e / g.Dv;
      vt[e] = twinfer::ew::load(vb[(j0 + t) * g.vs.s + (e - t * g.Dv)]);
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int64_t i = row0 + r;
      if (i >= g.Sq) continue;  // the warp as a whole: i is the same in every lane
      T* qkrow = qk ? qk + ((bh * g.Sq + i) * g.Sk) : nullptr;
      for (int t = 0; t < n; ++t) {
        const int64_t j = j0 + t;
        float s = 0.f;
#pragma unroll
        for (int c = 0; c < DL; ++c) {
          const int64_t d = lane + 32 * c;
          if (d < g.D) s += qr[r][c] * kt[t * g.D + d];
        }
        for (int off16 = 16; off16 > 0; off16 >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off16);
        s *= g.scale;
        if (g.softcap > 0.f) s = g.softcap * tanhf(s / g.softcap);
        if (qkrow && g.qk_mode <= 1 && lane == 0) qkrow[j] = twinfer::ew::store<T>(s);
        float bias = 0.f;
        if (g.mask_kind) {
          if (j >= g.mask_k) {
            bias = -INFINITY;
          } else {
            const int64_t mi = b * g.mstride[0] + h * g.mstride[1] + i * g.mstride[2] + j * g.mstride[3];
            if (g.mask_kind == 2) bias = static_cast<const bool*>(mask)[mi] ? 0.f : -INFINITY;
            else bias = twinfer::ew::load(static_cast<const T*>(mask)[mi]);
          }
        }
        if (twinfer::tx::attn_key_hidden(i, j, off, g.causal, g.left, g.right, valid)) bias += -INFINITY;
        s += bias;
        if (qkrow && g.qk_mode >= 2 && lane == 0) qkrow[j] = twinfer::ew::store<T>(s);
        if (s == -INFINITY) continue;  // no weight; keeps an all-masked row at zero
        const float m_new = fmaxf(mx[r], s);
        const float corr = expf(mx[r] - m_new), p = expf(s - m_new);
        mx[r] = m_new;
        sum[r] = sum[r] * corr + p;
#pragma unroll
        for (int c = 0; c < DL; ++c) {
          const int64_t d = lane + 32 * c;
          acc[r][c] = acc[r][c] * corr + (d < g.Dv ? p * vt[t * g.Dv + d] : 0.f);
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
      if (d < g.Dv) ob[i * g.os.s + d] = twinfer::ew::store<T>(acc[r][c] * inv);
    }
  }
}

// qk_matmul_output_mode 3: the rows attention_rows wrote as mode 2 (scores
// plus mask) become their softmax in place; a row that is -inf everywhere
// becomes zeros, as the CPU kernel has it. A warp per row.
template <typename T>
__global__ void softmax_qk_rows(T* __restrict__ qk, int64_t rows, int64_t S) {
  const int lane = threadIdx.x & 31;
  const int64_t row = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5;
  if (row >= rows) return;  // the warp as a whole
  T* x = qk + row * S;
  float m = -INFINITY;
  for (int64_t j = lane; j < S; j += 32) m = fmaxf(m, twinfer::ew::load(x[j]));
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  if (m == -INFINITY) {
    for (int64_t j = lane; j < S; j += 32) x[j] = twinfer::ew::store<T>(0.f);
    return;
  }
  float sum = 0.f;
  for (int64_t j = lane; j < S; j += 32) sum += expf(twinfer::ew::load(x[j]) - m);
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  for (int64_t j = lane; j < S; j += 32) x[j] = twinfer::ew::store<T>(expf(twinfer::ew::load(x[j]) - m) / sum);
}

// present = concat(past, new) along the sequence: out [B, Hkv, S, D], past
// [B, Hkv, Sp, D] (may be absent when Sp == 0), the new rows a strided
// [B, Hkv, S - Sp, D] view (3-D or 4-D input). A thread per element.
struct PresentGeom {
  int64_t B, Hkv, Sp, S, D;
  twinfer::tx::AttnStrides cur;
};

template <typename T>
__global__ void write_present(PresentGeom g, const T* __restrict__ past, const T* __restrict__ cur,
                              T* __restrict__ out) {
  const int64_t n = g.B * g.Hkv * g.S * g.D;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t d = e % g.D, j = e / g.D % g.S, bh = e / (g.D * g.S);
    const int64_t b = bh / g.Hkv, kh = bh % g.Hkv;
    out[e] = j < g.Sp ? past[(bh * g.Sp + j) * g.D + d] : cur[b * g.cur.b + kh * g.cur.h + (j - g.Sp) * g.cur.s + d];
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

// A boolean mask as the additive bias cuDNN takes: 0 where a key is kept,
// -inf where it is masked (contiguous, the mask's own dims).
template <typename T>
__global__ void bool_mask_to_bias(const bool* __restrict__ m, T* __restrict__ out, int64_t n) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x)
    out[e] = twinfer::ew::store<T>(m[e] ? 0.f : -INFINITY);
}

// After cuDNN: output rows whose mask row is -inf at every key become zeros,
// as ONNX's errata (and our own kernel) have them; flash kernels leave them
// undefined (0/0). A warp per row of the mask itself ([mb, mh, mi, mj],
// contiguous), which zeroes every output row that mask row covers.
struct MaskRows {
  int64_t dims[4];       // the mask over [b, h, i, j], 1 where it broadcasts
  int64_t B, H, Sq, Dv;  // the output
  twinfer::tx::AttnStrides os;  // its rows
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
    T* out = o + b * g.os.b + h * g.os.h + i * g.os.s;
    for (int64_t d = lane; d < g.Dv; d += 32) out[d] = twinfer::ew::store<T>(0.f);
  }
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {

namespace {

constexpr unsigned kAttnTypes = ew::kF32 | ew::kF16 | ew::kBF16;
constexpr int64_t kMaxHeadDim = 256;

bool present(const KernelBuildInfo& info, size_t i) { return i < info.node().inputs.size() && info.has_input(i); }

// The node as our kernel runs it: its geometry, what else it reads and
// writes, and whether it is the plain case cuDNN may take. False (with
// `why`) for what the kernel does not take; the checks mirror the CPU
// kernel's constructor, so a node supports() accepts never fails to build.
struct AttnPlan {
  twinfer_gpu::AttnGeom g{};
  bool in3d = false;
  bool out_pk = false, out_pv = false, out_qk = false;
  bool plain = false;             // 4-D (Hkv may divide Hq), no cache, padding, softcap, window, extra outputs, short mask
  int64_t offset[3] = {0, 0, 0};  // q, k, v: where their views start (elements; attention_views.h)
  bool viewed = false;            // operands (and maybe the output) read and written in place
  int64_t mask_dims[4] = {1, 1, 1, 1};  // the mask right-aligned onto 4 dims
};

bool plan_attention(const KernelBuildInfo& info, AttnPlan* p, std::string* why) {
  auto no = [&](const std::string& w) {
    if (why) *why = w;
    return false;
  };
  const graph::Node& n = info.node();
  for (size_t i = 0; i < 3; ++i) {
    if (!present(info, i)) return no("Attention needs query, key and value");
    if (!ew::check_input_dtype(info, i, kAttnTypes, why)) return false;
    if (info.input_dtype(i) != info.input_dtype(0)) return no("Attention with inputs of different types has no CUDA kernel");
  }
  // Strided operands (attention_views.h): the sizes come from the views.
  tx::AttnViews views;
  std::string bad = tx::read_attention_views(n, &views);
  if (bad.empty() && views.any()) bad = tx::check_attention_views(info, views);
  if (!bad.empty()) return no(bad);
  auto dims_of = [&](int i) {
    return views.any() ? Shape(views.in[i].dims, views.in[i].dims + 4) : info.input_shape(static_cast<size_t>(i));
  };
  const Shape q = dims_of(0), k = dims_of(1), v = dims_of(2);
  if (!((q.size() == 3 || q.size() == 4) && k.size() == q.size() && v.size() == q.size()))
    return no("Attention whose query, key and value are not all 3-D or all 4-D runs on the CPU");
  twinfer_gpu::AttnGeom& g = p->g;
  p->in3d = q.size() == 3;
  g.B = q[0];
  int64_t Skv = 0;
  if (p->in3d) {
    g.H = n.attr_int("q_num_heads", 0);
    g.Hkv = n.attr_int("kv_num_heads", 0);
    if (g.H <= 0 || g.Hkv <= 0) return no("3-D Attention without positive q_num_heads and kv_num_heads runs on the CPU");
    if (q[2] % g.H || k[2] % g.Hkv || v[2] % g.Hkv)
      return no("3-D Attention whose hidden sizes are not multiples of the head counts runs on the CPU");
    g.Sq = q[1], Skv = k[1], g.D = q[2] / g.H, g.Dv = v[2] / g.Hkv;
    if (k[2] / g.Hkv != g.D || v[1] != Skv)
      return no("Attention with grouped key heads or mismatched shapes runs on the CPU");
  } else {
    g.H = q[1], g.Hkv = k[1], g.Sq = q[2], Skv = k[2], g.D = q[3], g.Dv = v[3];
    if (k[3] != g.D || v[1] != g.Hkv || v[2] != Skv)
      return no("Attention with grouped key heads or mismatched shapes runs on the CPU");
  }
  if (k[0] != g.B || v[0] != g.B || g.Hkv <= 0 || g.H % g.Hkv != 0)
    return no("Attention with grouped key heads or mismatched shapes runs on the CPU");
  if (g.D > kMaxHeadDim || g.Dv > kMaxHeadDim) return no("Attention heads wider than 256 run on the CPU");

  // The in-op cache (past_key / past_value) and padding lengths.
  g.has_past = present(info, 4) || present(info, 5);
  g.past = 0;
  if (g.has_past) {
    if (!present(info, 4) || !present(info, 5)) return no("Attention with only one of past_key / past_value runs on the CPU");
    if (info.input_dtype(4) != info.input_dtype(0) || info.input_dtype(5) != info.input_dtype(0))
      return no("Attention with a cache of another type runs on the CPU");
    const Shape pk = info.input_shape(4), pv = info.input_shape(5);
    if (pk.size() != 4 || pk[0] != g.B || pk[1] != g.Hkv || pk[3] != g.D || pv != Shape{g.B, g.Hkv, pk[2], g.Dv})
      return no("Attention with a past_key / past_value of another shape runs on the CPU");
    g.past = pk[2];
  }
  g.Sk = g.past + Skv;
  g.nonpad_kind = 0;
  if (present(info, 6)) {
    if (g.has_past) return no("Attention with both past_key and nonpad_kv_seqlen runs on the CPU");
    const DType t = info.input_dtype(6);
    if (t != DType::kInt32 && t != DType::kInt64) return no("nonpad_kv_seqlen that is not int32 or int64 runs on the CPU");
    if (shape_numel(info.input_shape(6)) != g.B) return no("nonpad_kv_seqlen without a value per batch runs on the CPU");
    g.nonpad_kind = t == DType::kInt32 ? 1 : 2;
  }
  for (size_t i = 7; i < n.inputs.size(); ++i)
    if (info.has_input(i)) return no("Attention with inputs after nonpad_kv_seqlen runs on the CPU");

  // Outputs and attributes.
  p->out_pk = info.has_output(1), p->out_pv = info.has_output(2), p->out_qk = info.has_output(3);
  for (size_t i = 4; i < n.outputs.size(); ++i)
    if (info.has_output(i)) return no("Attention with outputs after qk_matmul_output runs on the CPU");
  const int64_t mode = n.attr_int("qk_matmul_output_mode", 0);
  if (mode < 0 || mode > 3) return no("Attention with a qk_matmul_output_mode outside 0..3 runs on the CPU");
  g.qk_mode = p->out_qk ? static_cast<int>(mode) : -1;
  g.softcap = n.attr_float("softcap", 0.f);
  if (!(g.softcap > 0.f)) g.softcap = 0.f;  // the CPU kernel applies it only when positive
  g.causal = n.attr_int("is_causal", 0) != 0;
  g.left = g.right = -1;
  if (info.opset() >= 25) {  // the window attributes exist from opset 25 (the CPU kernel ignores them before)
    g.left = n.attr_int("left_window_size", -1);
    g.right = n.attr_int("right_window_size", -1);
    if (g.left < -1 || g.right < -1) return no("Attention with a window size below -1 runs on the CPU");
  }
  g.scale = n.has_attr("scale") ? n.attr_float("scale", 1.f) : 1.f / std::sqrt(static_cast<float>(g.D));

  // The mask, right-aligned onto [B, Hq, Sq, S]; its key dim may be shorter than S.
  g.mask_kind = 0;
  g.mask_k = g.Sk;
  for (int d = 0; d < 4; ++d) g.mstride[d] = 0;
  bool short_mask = false;
  if (present(info, 3)) {
    const DType md = info.input_dtype(3);
    if (md != DType::kBool && md != info.input_dtype(0)) return no("an Attention mask of another float type runs on the CPU");
    const Shape m = info.input_shape(3);
    if (m.empty() || m.size() > 4) return no("an Attention mask of rank 0 or above 4 runs on the CPU");
    g.mask_kind = md == DType::kBool ? 2 : 1;
    Shape m4(4 - m.size(), 1);
    m4.insert(m4.end(), m.begin(), m.end());
    const int64_t full[3] = {g.B, g.H, g.Sq};
    for (int d = 0; d < 3; ++d)
      if (m4[d] != 1 && m4[d] != full[d])
        return no("an Attention mask that does not broadcast onto [B, H, Sq, Sk] runs on the CPU");
    if (m4[3] > g.Sk && m4[3] != 1) return no("an Attention mask with more keys than the keys runs on the CPU");
    const Shape st = contiguous_strides(m4);
    for (int d = 0; d < 4; ++d) {
      p->mask_dims[d] = m4[d];
      g.mstride[d] = m4[d] == 1 ? 0 : st[d];
    }
    g.mask_k = m4[3] == 1 ? g.Sk : m4[3];
    short_mask = g.mask_k != g.Sk;
  }

  g.qs = tx::attn_strides(p->in3d, g.H, g.Sq, g.D);
  g.os = tx::attn_strides(p->in3d, g.H, g.Sq, g.Dv);
  if (g.has_past) {  // attention reads present ([B, Hkv, S, D], written first)
    g.ks = tx::attn_strides(false, g.Hkv, g.Sk, g.D);
    g.vs = tx::attn_strides(false, g.Hkv, g.Sk, g.Dv);
  } else {
    g.ks = tx::attn_strides(p->in3d, g.Hkv, Skv, g.D);
    g.vs = tx::attn_strides(p->in3d, g.Hkv, Skv, g.Dv);
  }
  if (views.any()) {
    p->viewed = true;
    twinfer::tx::AttnStrides* st[3] = {&g.qs, &g.ks, &g.vs};
    for (int i = 0; i < 3; ++i) {
      *st[i] = views.in[i].st;
      p->offset[i] = views.in[i].offset;
    }
    if (views.has_out) g.os = views.out;
  }
  g.q_tiles = (g.Sq + twinfer_gpu::kRowsPerBlock - 1) / twinfer_gpu::kRowsPerBlock;
  p->plain = !p->in3d && !g.has_past && !g.nonpad_kind && !p->out_pk && !p->out_pv && !p->out_qk &&
             g.softcap == 0.f && g.left < 0 && g.right < 0 && !short_mask;
  return true;
}

bool attention_supports(const KernelBuildInfo& info, std::string* why) {
  AttnPlan p;
  return plan_attention(info, &p, why);
}

class CudaAttention final : public Kernel {
 public:
  explicit CudaAttention(const KernelBuildInfo& info) : dtype_(info.input_dtype(0)) {
    std::string why;
    if (!plan_attention(info, &plan_, &why)) info.fail(ErrorKind::kUnsupportedOp, why);
    g_ = plan_.g;
    for (int d = 0; d < 4; ++d) mask_dims_[d] = plan_.mask_dims[d];
    const int64_t widest = std::max(g_.D, g_.Dv);
    dl_ = widest <= 32 ? 1 : widest <= 64 ? 2 : widest <= 128 ? 4 : 8;
    // With a cache, attention reads present: the outputs, or scratch where one is not asked for.
    if (g_.has_past) {
      const size_t es = dtype_size(dtype_);
      if (!plan_.out_pk) pk_scratch_ = round_up(static_cast<int64_t>(g_.B * g_.Hkv * g_.Sk * g_.D * es), 256);
      if (!plan_.out_pv) pv_scratch_ = round_up(static_cast<int64_t>(g_.B * g_.Hkv * g_.Sk * g_.Dv * es), 256);
    }
    const char* mode = std::getenv("TWINFER_ATTENTION");
    const std::string forced = mode ? mode : "";
    if (forced == "ours") {
      name_ = "cuda attention (online softmax; TWINFER_ATTENTION=ours)";
    } else {
      try_cudnn(info);
      if (sdpa_ && forced != "cudnn") keep_the_faster();
    }
    if (plan_.viewed) name_ += " [strided in place]";
  }

  size_t scratch_bytes() const override {
    if (sdpa_)
      return round_up(static_cast<int64_t>(sdpa_->workspace_bytes()), 256) +
             round_up(static_cast<int64_t>(expanded_bytes_), 256) + bool_bias_bytes_;
    return pk_scratch_ + pv_scratch_;
  }
  void run(KernelContext& ctx) const override {
    const cudaStream_t s = stream_of(ctx);
    const void* qp = operand(ctx, 0);
    const void* kp = operand(ctx, 1);
    const void* vp = operand(ctx, 2);
    if (g_.has_past || plan_.out_pk || plan_.out_pv) {
      char* scratch = static_cast<char*>(ctx.scratch);
      void* pk = plan_.out_pk ? ctx.outputs[1].data : (g_.has_past ? scratch : nullptr);
      void* pv = plan_.out_pv ? ctx.outputs[2].data : (g_.has_past ? scratch + pk_scratch_ : nullptr);
      const int64_t Skv = g_.Sk - g_.past;
      const twinfer::tx::AttnStrides kst = tx::attn_strides(plan_.in3d, g_.Hkv, Skv, g_.D);
      const twinfer::tx::AttnStrides vst = tx::attn_strides(plan_.in3d, g_.Hkv, Skv, g_.Dv);
      if (pk) write_present(ctx, pk, g_.has_past ? ctx.inputs[4].data : nullptr, kp, g_.D, kst, s);
      if (pv) write_present(ctx, pv, g_.has_past ? ctx.inputs[5].data : nullptr, vp, g_.Dv, vst, s);
      if (g_.has_past) kp = pk, vp = pv;
    }
    const int64_t blocks = g_.B * g_.H * g_.q_tiles;
    if (blocks == 0) return;
    if (g_.Sk == 0) {  // no key at all: every row is all-masked (and qk_matmul_output is empty)
      check(cudaMemsetAsync(ctx.outputs[0].data, 0, ctx.outputs[0].bytes(), stream_of(ctx)), "cudaMemsetAsync (Attention)");
      return;
    }
    // cuDNN's plan assumed 16-byte aligned operands (cudnn_aligned_views
    // checked the offsets; the arena is 256-byte aligned), but a graph input
    // is the caller's tensor as it is (a slice may start anywhere): our own
    // kernel takes what cuDNN's TMA loads cannot.
    const void* mask = g_.mask_kind ? ctx.inputs[3].data : nullptr;
    void* out = ctx.outputs[0].data;
    if (sdpa_ && cudnn_pointers_aligned(qp, kp, vp, mask, out))
      return launch_cudnn(qp, kp, vp, mask, out, ctx.scratch, s);
    const void* nonpad = g_.nonpad_kind ? ctx.inputs[6].data : nullptr;
    int* error = g_.nonpad_kind ? kernel_error_flag(ctx.backend_state) : nullptr;
    launch_ours(qp, kp, vp, mask, nonpad, out, plan_.out_qk ? ctx.outputs[3].data : nullptr, error, s);
  }
  const char* impl_name() const override { return name_.c_str(); }

 private:
  // Input i where its view starts.
  const void* operand(KernelContext& ctx, int i) const {
    return static_cast<const char*>(ctx.inputs[i].data) + plan_.offset[i] * static_cast<int64_t>(dtype_size(dtype_));
  }

  // Our kernel (attention_rows), then mode 3's softmax of the qk rows.
  void launch_ours(const void* qp, const void* kp, const void* vp, const void* mask, const void* nonpad, void* out,
                   void* qk_out, int* error, cudaStream_t s) const {
    const int64_t blocks = g_.B * g_.H * g_.q_tiles;
    // Here, not in run(): a plan-build trial that throws counts the form out.
    if (blocks > INT32_MAX) throw Error(ErrorKind::kUnsupportedOp, "Attention with more than 2^31 row blocks");
    const size_t shared = static_cast<size_t>(twinfer_gpu::kTile * (g_.D + g_.Dv)) * sizeof(float);
    ew::dispatch_typeset<kAttnTypes>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* qk = static_cast<T*>(qk_out);
      auto go = [&](auto dl) {
        twinfer_gpu::attention_rows<T, decltype(dl)::value>
            <<<static_cast<uint32_t>(blocks), twinfer_gpu::kAttnWarps * 32, shared, s>>>(
                g_, static_cast<const T*>(qp), static_cast<const T*>(kp), static_cast<const T*>(vp), mask, nonpad,
                static_cast<T*>(out), qk, error);
      };
      switch (dl_) {
        case 1: go(std::integral_constant<int, 1>{}); break;
        case 2: go(std::integral_constant<int, 2>{}); break;
        case 4: go(std::integral_constant<int, 4>{}); break;
        default: go(std::integral_constant<int, 8>{}); break;
      }
      check_launch("Attention launch");
      if (qk && g_.qk_mode == 3) {
        const int64_t rows = g_.B * g_.H * g_.Sq;
        const int64_t qblocks = (rows * 32 + 255) / 256;
        if (qblocks > INT32_MAX) throw Error(ErrorKind::kUnsupportedOp, "Attention with more than 2^31 qk row blocks");
        twinfer_gpu::softmax_qk_rows<T><<<static_cast<uint32_t>(qblocks), 256, 0, s>>>(qk, rows, g_.Sk);
        check_launch("Attention qk softmax launch");
      }
    });
  }

  // Elements from a view's start to one past its last: q, k, v or the output.
  static int64_t view_span(const twinfer::tx::AttnStrides& st, int64_t b, int64_t h, int64_t seq, int64_t d) {
    return (b - 1) * st.b + (h - 1) * st.h + (seq - 1) * st.s + d;
  }

  // cuDNN's plan and our kernel on zeroed operands of the layer's extents
  // (a boolean mask all true, so that our kernel skips no key); the faster
  // is kept and both times go into the name. Only the plain case gets here
  // (try_cudnn): no cache, padding lengths or extra outputs.
  void keep_the_faster() {
    const size_t es = dtype_size(dtype_);
    TrialKey key("attention");
    key << static_cast<int64_t>(dtype_) << g_.B << g_.H << g_.Hkv << g_.Sq << g_.Sk << g_.D << g_.Dv << g_.mask_kind
        << g_.mask_k << g_.causal << g_.left << g_.right;
    for (const twinfer::tx::AttnStrides& st : {g_.qs, g_.ks, g_.vs, g_.os}) key << st.b << st.h << st.s;
    for (int d = 0; d < 4; ++d) key << mask_dims_[d] << g_.mstride[d];
    const FormTiming t = time_two_forms("ours", "cuDNN", key, [&] {
      auto bytes = [&](int64_t elements) { return static_cast<size_t>(elements) * es; };
      const TrialBuffer q(bytes(view_span(g_.qs, g_.B, g_.H, g_.Sq, g_.D))),
          k(bytes(view_span(g_.ks, g_.B, g_.Hkv, g_.Sk, g_.D))), v(bytes(view_span(g_.vs, g_.B, g_.Hkv, g_.Sk, g_.Dv))),
          o(bytes(view_span(g_.os, g_.B, g_.H, g_.Sq, g_.Dv)));
      const int64_t mask_n = g_.mask_kind ? mask_dims_[0] * mask_dims_[1] * mask_dims_[2] * mask_dims_[3] : 0;
      const size_t mask_bytes = g_.mask_kind == 2 ? static_cast<size_t>(mask_n) : bytes(mask_n);
      const TrialBuffer mask(mask_bytes), scratch(scratch_bytes());
      if (g_.mask_kind == 2) {
        const std::vector<uint8_t> all_true(mask_bytes, 1);
        copy_to_device_now(mask.get(), all_true.data(), mask_bytes, "Attention trial mask");
      }
      const void* m = g_.mask_kind ? mask.get() : nullptr;
      return fastest_of_two_ms(
          [&](cudaStream_t s) { launch_ours(q.get(), k.get(), v.get(), m, nullptr, o.get(), nullptr, nullptr, s); },
          [&](cudaStream_t s) { launch_cudnn(q.get(), k.get(), v.get(), m, o.get(), scratch.get(), s); });
    });
    if (t.first_wins) {
      sdpa_.reset();
      expanded_bytes_ = bool_bias_bytes_ = 0;
      name_ = "cuda attention (online softmax; " + t.timed + ")";
    } else {
      name_.insert(name_.size() - 1, "; " + t.timed);  // inside the closing parenthesis
    }
  }

  // present = concat(past, new) into `out` ([B, Hkv, S, d]).
  void write_present(KernelContext&, void* out, const void* past, const void* cur, int64_t d,
                     twinfer::tx::AttnStrides cur_strides, cudaStream_t s) const {
    const twinfer_gpu::PresentGeom pg{g_.B, g_.Hkv, g_.past, g_.Sk, d, cur_strides};
    const int64_t n = g_.B * g_.Hkv * g_.Sk * d;
    if (n == 0) return;
    const int grid = static_cast<int>(std::min<int64_t>((n + 255) / 256, 65535));
    ew::dispatch_typeset<kAttnTypes>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      twinfer_gpu::write_present<T><<<grid, 256, 0, s>>>(pg, static_cast<const T*>(past), static_cast<const T*>(cur),
                                                          static_cast<T*>(out));
    });
    check_launch("Attention present (KV cache) launch");
  }

  // Views for cuDNN: every operand's start and each stride of a dim above 1
  // a multiple of 16 bytes (the pass's views are: offsets and strides are
  // multiples of the head dim; a model may carry others, which our kernel
  // takes instead). False with the operand in `why`.
  bool cudnn_aligned_views(std::string* why) const {
    const int64_t es = static_cast<int64_t>(dtype_size(dtype_));
    const char* names[4] = {"q", "k", "v", "output"};
    const twinfer::tx::AttnStrides st[4] = {g_.qs, g_.ks, g_.vs, g_.os};
    const int64_t heads[4] = {g_.H, g_.Hkv, g_.Hkv, g_.H}, lens[4] = {g_.Sq, g_.Sk, g_.Sk, g_.Sq};
    for (int t = 0; t < 4; ++t) {
      const int64_t offset = t < 3 ? plan_.offset[t] : 0;
      const bool ok = (offset * es) % 16 == 0 && (g_.B == 1 || (st[t].b * es) % 16 == 0) &&
                      (heads[t] == 1 || (st[t].h * es) % 16 == 0) && (lens[t] == 1 || (st[t].s * es) % 16 == 0);
      if (!ok) {
        *why = std::string("the ") + names[t] + " view is not 16-byte aligned";
        return false;
      }
    }
    return true;
  }

  // Whether this run's operands are where the cuDNN plan may read them:
  // q, k, v (at their views' starts), the output and an additive mask read
  // in place all 16-byte aligned (a boolean mask is read from our scratch,
  // converted).
  bool cudnn_pointers_aligned(const void* q, const void* k, const void* v, const void* mask, const void* out) const {
    auto a16 = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; };
    if (!a16(q) || !a16(k) || !a16(v) || !a16(out)) return false;
    return !(g_.mask_kind == 1 && !expanded_bytes_) || a16(mask);
  }

  // Strides for cuDNN: a dim of 1 (stride 0 in a view: never stepped) gets
  // the stride it would have as the outermost dim, a layout cuDNN's checks
  // know.
  static twinfer::tx::AttnStrides outer_if_one(twinfer::tx::AttnStrides st, int64_t b, int64_t h, int64_t s,
                                               int64_t d) {
    const int64_t outer = std::max({b > 1 ? st.b * b : 0, h > 1 ? st.h * h : 0, s > 1 ? st.s * s : 0, d});
    if (b == 1) st.b = outer;
    if (h == 1) st.h = outer;
    if (s == 1) st.s = outer;
    return st;
  }

  // cuDNN's fused attention where it applies (sdpa_plan.h); otherwise the
  // reason goes into the kernel's name and our own kernel runs.
  void try_cudnn(const KernelBuildInfo& info) {
    (void)info;
    std::string why;
    if (!plan_.plain) {
      why = "3-D inputs, a cache, padding lengths, softcap, a window, a short mask or extra outputs";
    } else if (dtype_ == DType::kFloat32) {
      why = "float32 (cuDNN's fused attention takes float16 and bfloat16)";
    } else if (g_.mask_kind != 0 && g_.causal) {
      why = "a mask together with causal";
    } else if (g_.B == 0 || g_.H == 0 || g_.Sq == 0 || g_.Sk == 0 || g_.D == 0 || g_.Dv == 0) {
      why = "an empty dim";  // nothing to compute (run() returns early); cuDNN's checks divide by them
    } else if (plan_.viewed && !cudnn_aligned_views(&why)) {
      // why says which operand
    } else {
      SdpaSpec spec;
      spec.B = g_.B, spec.H = g_.H, spec.Sq = g_.Sq, spec.Sk = g_.Sk, spec.D = g_.D, spec.Dv = g_.Dv;
      spec.Hkv = g_.Hkv;  // grouped query heads read their key head in place (cuDNN's GQA)
      spec.dtype = dtype_, spec.scale = g_.scale, spec.causal = g_.causal;
      spec.set_strides(outer_if_one(g_.qs, g_.B, g_.H, g_.Sq, g_.D), outer_if_one(g_.ks, g_.B, g_.Hkv, g_.Sk, g_.D),
                       outer_if_one(g_.vs, g_.B, g_.Hkv, g_.Sk, g_.Dv), outer_if_one(g_.os, g_.B, g_.H, g_.Sq, g_.Dv));
      // A boolean mask goes as the additive bias it means, written out
      // before each run (bool_mask_to_bias).
      if (g_.mask_kind != 0) spec.set_broadcast_bias(mask_dims_);
      if (g_.mask_kind == 2)
        bool_bias_bytes_ = static_cast<size_t>(mask_dims_[0] * mask_dims_[1] * mask_dims_[2] * mask_dims_[3]) *
                           dtype_size(dtype_);
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
    if (!sdpa_) bool_bias_bytes_ = 0;
    name_ = sdpa_ ? "cudnn sdpa (" + sdpa_->plan_name() + (expanded_bytes_ ? "; mask written out per query" : "") +
                        (bool_bias_bytes_ ? "; boolean mask as a bias)" : ")")
                  : "cuda attention (online softmax; not cuDNN: " + why + ")";
  }

  // cuDNN's plan; `mask` is the model's (additive or boolean), `ws` the
  // scratch (scratch_bytes).
  void launch_cudnn(const void* q, const void* k, const void* v, const void* mask, void* out, void* scratch,
                    cudaStream_t s) const {
    char* ws = static_cast<char*>(scratch);
    // The model's additive mask as it is; a boolean one (never handed to
    // cuDNN as it is) converted first.
    const void* bias = g_.mask_kind == 1 ? mask : nullptr;
    if (g_.mask_kind == 2) {  // scratch: [cuDNN's workspace][the mask per query][this bias]
      if (!bool_bias_bytes_) throw Error(ErrorKind::kRuntime, "Attention: a boolean mask without its bias scratch");
      ew::dispatch_typeset<ew::kF16 | ew::kBF16>(dtype_, [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* additive = reinterpret_cast<T*>(ws + round_up(static_cast<int64_t>(sdpa_->workspace_bytes()), 256) +
                                           round_up(static_cast<int64_t>(expanded_bytes_), 256));
        const int64_t n = mask_dims_[0] * mask_dims_[1] * mask_dims_[2] * mask_dims_[3];
        const int grid = static_cast<int>(std::min<int64_t>((n + 255) / 256, 65535));
        twinfer_gpu::bool_mask_to_bias<T><<<grid, 256, 0, s>>>(static_cast<const bool*>(mask), additive, n);
        check_launch("Attention boolean mask launch");
        bias = additive;
      });
    }
    const void* mask_rows = bias;  // the additive mask as the model gave it, or converted
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
    sdpa_->run(q, k, v, bias, out, ws, s);
    if (g_.mask_kind == 0) return;
    ew::dispatch_typeset<ew::kF16 | ew::kBF16>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const twinfer_gpu::MaskRows mr{{mask_dims_[0], mask_dims_[1], mask_dims_[2], mask_dims_[3]}, g_.B, g_.H, g_.Sq,
                                     g_.Dv, g_.os};
      const int64_t rows = mask_dims_[0] * mask_dims_[1] * mask_dims_[2];
      const int64_t blocks = (rows * 32 + 255) / 256;
      twinfer_gpu::zero_fully_masked_rows<T><<<static_cast<uint32_t>(blocks), 256, 0, s>>>(
          static_cast<const T*>(mask_rows), mr, static_cast<T*>(out));
      check_launch("Attention masked-row launch");
    });
  }

  DType dtype_;
  AttnPlan plan_;
  twinfer_gpu::AttnGeom g_{};
  int64_t pk_scratch_ = 0, pv_scratch_ = 0;  // present key / value in scratch (a cache not asked for as output)
  int dl_ = 2;
  std::shared_ptr<const SdpaPlan> sdpa_;
  int64_t mask_dims_[4] = {1, 1, 1, 1};
  size_t expanded_bytes_ = 0;  // the mask written out per query, after cuDNN's workspace
  size_t bool_bias_bytes_ = 0;  // a boolean mask as an additive one, after that
  std::string name_;
};


}  // namespace

TWINFER_REGISTER_KERNEL("Attention", Backend::kCUDA, 0, attention_supports, make_kernel<CudaAttention>);
TWINFER_REGISTER_KERNEL("Attention", Backend::kCUDA, 0, attention_supports, make_kernel<CudaAttention>, kTwinferDomain);

}  // namespace twinfer::cuda
