// The recurrent / positional transformer ops on CUDA, written for
// correctness first: a thread per independent piece of work, in the CPU
// kernels' order and compute type (float for float16/bfloat16).
// - RotaryEmbedding: a thread per (row, pair) rotating one (x1, x2) pair,
//   plus a thread per element past rotary_embedding_dim copying it; the
//   geometry and the pair math are the CPU kernel's (ops/transformer/
//   rotary_math.h). A position_ids value outside the cache sets the kernel
//   error flag (kIndexOutOfRange) and leaves that row unwritten.
// - SwiGLU: y = Swish_alpha(A) * B elementwise (ew::Swish, the CPU's functor).
// - CausalConvWithState: a thread per output element (y and present_state),
//   each summing its k taps in the CPU's order (ops/transformer/
//   causal_conv_math.h).
// - LinearAttention: a thread per (batch, kv head, value column): the state's
//   column of d_k floats lives in the kernel's scratch and runs through the
//   tokens in order with the CPU kernel's update rules (every step of the
//   recurrence touches only its own column), writing y for the query heads
//   sharing the kv head and present_state at the end.
#include <string>

#include "backends/cuda/elementwise_kernels.cuh"
#include "backends/cuda/error_flag.h"
#include "backends/cuda/kernel_util.h"
#include "ops/elementwise/functors.h"
#include "ops/transformer/causal_conv_math.h"
#include "ops/transformer/linear_attention_geom.h"
#include "ops/transformer/rotary_math.h"
#include "ops/transformer/tx_math.h"

namespace twinfer_gpu {

using twinfer::ew::compute_t;
using twinfer::ew::load;
using twinfer::ew::store;

// Thread t: row r = t / per_row, j = t % per_row; j < half rotates pair j,
// otherwise copies element rot + (j - half). x and y may be one buffer (each
// thread reads its own elements before writing them), so neither is restrict.
template <typename T, typename P>
__global__ void rotary(int64_t n, twinfer::tx::RotaryGeom g, const T* x, const T* __restrict__ cosc,
                       const T* __restrict__ sinc, const P* __restrict__ pos, T* y, int* error) {
  using C = compute_t<T>;
  const int64_t half = g.rot / 2, per_row = half + (g.D - g.rot);
  for (int64_t t = first_index(); t < n; t += grid_stride()) {
    const int64_t r = t / per_row, j = t % per_row;
    const int64_t off = g.row_offset(r);
    if (j >= half) {
      const int64_t e = off + g.rot + (j - half);
      y[e] = x[e];
      continue;
    }
    const int64_t bs = r / g.H, s = bs % g.S, b = bs / g.S;
    int64_t crow = b * g.cache_batch_stride + s;
    if (pos) {
      crow = static_cast<int64_t>(pos[bs]);
      if (crow < 0 || crow >= g.max_pos) {
        *error = twinfer::cuda::kIndexOutOfRange;
        continue;
      }
    }
    const int64_t i1 = off + g.first(j), i2 = off + g.second(j);
    const C x1 = load(x[i1]), x2 = load(x[i2]);
    T y1, y2;
    twinfer::tx::rotary_pair<T, C>(load(cosc[crow * half + j]), load(sinc[crow * half + j]), x1, x2, y1, y2);
    y[i1] = y1;
    y[i2] = y2;
  }
}

template <typename T>
__global__ void swiglu(int64_t n, float alpha, const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ y) {
  using C = compute_t<T>;
  const twinfer::ew::Swish f{alpha};
  for (int64_t i = first_index(); i < n; i += grid_stride())
    y[i] = store<T>(f(static_cast<C>(load(a[i]))) * load(b[i]));
}

// Thread t over B*C lanes of (L + P): position l < L of y, else present_state[l - L].
template <typename T>
__global__ void causal_conv(int64_t n, twinfer::tx::CausalConvGeom g, const T* __restrict__ x,
                            const T* __restrict__ w, const T* __restrict__ bias, const T* __restrict__ past,
                            T* __restrict__ y, T* __restrict__ pres) {
  const int64_t L = g.L, K = g.K, P = g.K - 1, per = g.L + (pres ? P : 0);
  for (int64_t t = first_index(); t < n; t += grid_stride()) {
    const int64_t bc = t / per, l = t % per, c = bc % g.C;
    const T* xr = x + bc * L;
    const T* pr = past ? past + bc * P : nullptr;
    if (l < L) {
      y[bc * L + l] = twinfer::tx::causal_conv_at(xr, pr, w + c * K, bias ? bias + c : nullptr, K, g.silu, l);
    } else {
      pres[bc * P + (l - L)] = store<T>(twinfer::tx::causal_conv_padded(xr, pr, P, l));
    }
  }
}

// Thread t = (b * Hkv + h) * dv + m: column m of kv head h's state, st[d * dv]
// in scratch (float), tokens in order.
template <typename T, typename S>
__global__ void linear_attention(twinfer::tx::LinAttnGeom g, const T* __restrict__ Q, const T* __restrict__ K,
                                 const T* __restrict__ V, const S* __restrict__ past, const T* __restrict__ G,
                                 const T* __restrict__ Bt, T* __restrict__ Y, S* __restrict__ present,
                                 float* __restrict__ state) {
  using twinfer::tx::mul_rn;
  const int64_t Hq = g.Hq, Hkv = g.Hkv, dk = g.dk, dv = g.dv, group = Hq / Hkv;
  const int64_t n = g.B * Hkv * dv;
  for (int64_t t = first_index(); t < n; t += grid_stride()) {
    const int64_t m = t % dv, bh = t / dv, b = bh / Hkv, h = bh % Hkv;
    float* st = state + bh * dk * dv + m;
    for (int64_t d = 0; d < dk; ++d)
      st[d * dv] = past ? static_cast<float>(load(past[bh * dk * dv + d * dv + m])) : 0.f;
    for (int64_t tok = 0; tok < g.T; ++tok) {
      const int64_t bt = b * g.T + tok;
      const T* kr = K + (bt * Hkv + h) * dk;
      float vf = static_cast<float>(load(V[(bt * Hkv + h) * dv + m]));
      if (G) {
        if (g.decay_per_dim) {
          const T* gr = G + (bt * Hkv + h) * dk;
          for (int64_t d = 0; d < dk; ++d) st[d * dv] = mul_rn(st[d * dv], expf(static_cast<float>(load(gr[d]))));
        } else {
          const float e = expf(static_cast<float>(load(G[bt * Hkv + h])));
          for (int64_t d = 0; d < dk; ++d) st[d * dv] = mul_rn(st[d * dv], e);
        }
      }
      if (Bt) {
        const float beta = static_cast<float>(load(Bt[bt * g.beta_last + (g.beta_last == 1 ? 0 : h)]));
        float tmp = 0.f;
        for (int64_t d = 0; d < dk; ++d) tmp += mul_rn(st[d * dv], static_cast<float>(load(kr[d])));
        vf = mul_rn(beta, vf - tmp);
      }
      for (int64_t d = 0; d < dk; ++d) st[d * dv] += mul_rn(static_cast<float>(load(kr[d])), vf);
      for (int64_t q = 0; q < group; ++q) {
        const int64_t qh = h * group + q;
        const T* qr = Q + (bt * Hq + qh) * dk;
        float acc = 0.f;
        for (int64_t d = 0; d < dk; ++d) acc += mul_rn(static_cast<float>(load(qr[d])), st[d * dv]);
        Y[(bt * Hq + qh) * dv + m] = store<T>(mul_rn(g.scale, acc));
      }
    }
    if (present)
      for (int64_t d = 0; d < dk; ++d) present[bh * dk * dv + d * dv + m] = store<S>(st[d * dv]);
  }
}

}  // namespace twinfer_gpu

namespace twinfer::cuda {
namespace {

using ew::elementwise_launch;
using ew::LaunchConfig;

// float32 / float16 / bfloat16 (and float64 where noted) in every input `idx`
// present, all of input 0's dtype.
bool same_float(const KernelBuildInfo& info, std::initializer_list<size_t> idx, bool f64, std::string* why) {
  const DType dt = info.input_dtype(0);
  if (!ew::in_typeset(ew::kFloatTypes, dt) || (!f64 && dt == DType::kFloat64)) {
    if (why) *why = info.node().op_type + " of " + dtype_name(dt) + " has no CUDA kernel";
    return false;
  }
  for (size_t i : idx)
    if (info.has_input(i) && info.input_dtype(i) != dt) {
      if (why)
        *why = info.node().op_type + " input " + std::to_string(i) + " is " + dtype_name(info.input_dtype(i)) +
               ", input 0 is " + dtype_name(dt);
      return false;
    }
  return true;
}

// ---- RotaryEmbedding ------------------------------------------------------------

bool rotary_supports(const KernelBuildInfo& info, std::string* why) {
  if (!same_float(info, {1, 2}, true, why)) return false;
  if (info.has_input(3) && info.input_dtype(3) != DType::kInt64 && info.input_dtype(3) != DType::kInt32) {
    if (why) *why = "RotaryEmbedding position_ids must be int64 or int32";
    return false;
  }
  return true;
}

class CudaRotary final : public Kernel {
 public:
  explicit CudaRotary(const KernelBuildInfo& info)
      : g_(tx::rotary_geom(info)),
        dtype_(info.input_dtype(0)),
        pos_dtype_(info.has_input(3) ? info.input_dtype(3) : DType::kInt64) {}
  void run(KernelContext& ctx) const override {
    const int64_t n = g_.B * g_.S * g_.H * (g_.rot / 2 + (g_.D - g_.rot));
    const LaunchConfig lc = elementwise_launch(n);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    int* error = g_.has_pos ? kernel_error_flag(ctx.backend_state) : nullptr;
    ew::dispatch_typeset<ew::kFloatTypes>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      auto go = [&](auto ptag) {
        using P = decltype(ptag);
        twinfer_gpu::rotary<<<lc.blocks, lc.threads, 0, s>>>(
            n, g_, ctx.inputs[0].as<const T>(), ctx.inputs[1].as<const T>(), ctx.inputs[2].as<const T>(),
            g_.has_pos ? ctx.inputs[3].as<const P>() : nullptr, ctx.outputs[0].as<T>(), error);
      };
      if (pos_dtype_ == DType::kInt32) go(int32_t{});
      else go(int64_t{});
    });
    check_launch("RotaryEmbedding launch");
  }
  const char* impl_name() const override { return "cuda rotary (a thread per pair)"; }

 private:
  tx::RotaryGeom g_;
  DType dtype_, pos_dtype_;
};

// ---- SwiGLU -------------------------------------------------------------------

bool swiglu_supports(const KernelBuildInfo& info, std::string* why) { return same_float(info, {1}, true, why); }

class CudaSwiGLU final : public Kernel {
 public:
  explicit CudaSwiGLU(const KernelBuildInfo& info)
      : dtype_(info.input_dtype(0)), alpha_(info.node().attr_float("alpha", 1.f)) {
    if (info.input_shape(0) != info.input_shape(1))
      info.fail(ErrorKind::kShape, "SwiGLU inputs must have one shape, got " + shape_str(info.input_shape(0)) +
                                       " and " + shape_str(info.input_shape(1)));
  }
  void run(KernelContext& ctx) const override {
    const int64_t n = ctx.outputs[0].numel();
    const LaunchConfig lc = elementwise_launch(n);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    ew::dispatch_typeset<ew::kFloatTypes>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      twinfer_gpu::swiglu<<<lc.blocks, lc.threads, 0, s>>>(n, alpha_, ctx.inputs[0].as<const T>(),
                                                           ctx.inputs[1].as<const T>(), ctx.outputs[0].as<T>());
    });
    check_launch("SwiGLU launch");
  }
  const char* impl_name() const override { return "cuda swiglu (elementwise)"; }

 private:
  DType dtype_;
  float alpha_;
};

// ---- CausalConvWithState ---------------------------------------------------------

bool causal_conv_supports(const KernelBuildInfo& info, std::string* why) {
  return same_float(info, {1, 2, 3}, true, why);
}

class CudaCausalConv final : public Kernel {
 public:
  explicit CudaCausalConv(const KernelBuildInfo& info) : g_(tx::causal_conv_geom(info)), dtype_(info.input_dtype(0)) {}
  void run(KernelContext& ctx) const override {
    const int64_t n = g_.B * g_.C * (g_.L + (g_.has_present ? g_.K - 1 : 0));
    const LaunchConfig lc = elementwise_launch(n);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    ew::dispatch_typeset<ew::kFloatTypes>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      twinfer_gpu::causal_conv<<<lc.blocks, lc.threads, 0, s>>>(
          n, g_, ctx.inputs[0].as<const T>(), ctx.inputs[1].as<const T>(),
          g_.has_bias ? ctx.inputs[2].as<const T>() : nullptr, g_.has_past ? ctx.inputs[3].as<const T>() : nullptr,
          ctx.outputs[0].as<T>(), g_.has_present ? ctx.outputs[1].as<T>() : nullptr);
    });
    check_launch("CausalConvWithState launch");
  }
  const char* impl_name() const override { return "cuda causal conv (a thread per output)"; }

 private:
  tx::CausalConvGeom g_;
  DType dtype_;
};

// ---- LinearAttention ------------------------------------------------------------

using tx::linattn_has_present;
using tx::linattn_state_dtype;

bool linattn_supports(const KernelBuildInfo& info, std::string* why) {
  if (!same_float(info, {1, 2, 4, 5}, false, why)) return false;
  if (linattn_has_present(info) && info.has_input(3) && info.input_dtype(3) != info.output(1).dtype) {
    if (why) *why = "LinearAttention present_state dtype differs from past_state";
    return false;
  }
  const DType st = linattn_state_dtype(info);
  if (!ew::in_typeset(ew::kFloatTypes, st) || st == DType::kFloat64) {
    if (why) *why = std::string("LinearAttention state of ") + dtype_name(st) + " has no CUDA kernel";
    return false;
  }
  return true;
}

class CudaLinearAttention final : public Kernel {
 public:
  explicit CudaLinearAttention(const KernelBuildInfo& info)
      : g_(tx::linear_attention_geom(info)),
        dtype_(info.input_dtype(0)),
        state_dtype_(linattn_state_dtype(info)),
        present_(linattn_has_present(info)) {}
  size_t scratch_bytes() const override {
    return static_cast<size_t>(g_.B * g_.Hkv * g_.dk * g_.dv) * sizeof(float);
  }
  void run(KernelContext& ctx) const override {
    const int64_t n = g_.B * g_.Hkv * g_.dv;
    const LaunchConfig lc = elementwise_launch(n);
    if (!lc.blocks) return;
    const cudaStream_t s = stream_of(ctx);
    const bool has_past = ctx.inputs.size() > 3 && ctx.inputs[3].data;
    ew::dispatch_typeset<ew::kF32 | ew::kF16 | ew::kBF16>(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      ew::dispatch_typeset<ew::kF32 | ew::kF16 | ew::kBF16>(state_dtype_, [&](auto stag) {
        using S = typename decltype(stag)::type;
        twinfer_gpu::linear_attention<<<lc.blocks, lc.threads, 0, s>>>(
            g_, ctx.inputs[0].as<const T>(), ctx.inputs[1].as<const T>(), ctx.inputs[2].as<const T>(),
            has_past ? ctx.inputs[3].as<const S>() : nullptr, g_.rule.gating ? ctx.inputs[4].as<const T>() : nullptr,
            g_.rule.delta ? ctx.inputs[5].as<const T>() : nullptr, ctx.outputs[0].as<T>(),
            present_ ? ctx.outputs[1].as<S>() : nullptr, static_cast<float*>(ctx.scratch));
      });
    });
    check_launch("LinearAttention launch");
  }
  const char* impl_name() const override { return "cuda linear attention (a thread per state column)"; }

 private:
  tx::LinAttnGeom g_;
  DType dtype_, state_dtype_ = DType::kFloat32;
  bool present_;
};

}  // namespace

TWINFER_REGISTER_KERNEL("RotaryEmbedding", Backend::kCUDA, 0, rotary_supports, make_kernel<CudaRotary>);
TWINFER_REGISTER_KERNEL("SwiGLU", Backend::kCUDA, 0, swiglu_supports, make_kernel<CudaSwiGLU>);
TWINFER_REGISTER_KERNEL("CausalConvWithState", Backend::kCUDA, 0, causal_conv_supports, make_kernel<CudaCausalConv>);
TWINFER_REGISTER_KERNEL("LinearAttention", Backend::kCUDA, 0, linattn_supports, make_kernel<CudaLinearAttention>);

}  // namespace twinfer::cuda
