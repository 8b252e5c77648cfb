// LinearAttention (opset 27): the recurrent form of linear attention with
// four update rules on a per-KV-head state S of [d_k, d_v] (float32):
//   linear       S = S + k v^T
//   gated        S = exp(g) S + k v^T
//   delta        S = S + beta k (v - S^T k)^T
//   gated_delta  S = exp(g) S + beta k (v - (exp(g) S)^T k)^T
// and o_t = scale * q_t^T S for every query head sharing the KV head (GQA).
// Q/K/V/decay/beta are packed [B, T, H*D]; the state is [B, H_kv, d_k, d_v].
// Threaded over (batch, kv head); tokens run in order (chunk_size is only a
// tuning hint for chunked implementations).
//
// CausalConvWithState (opset 27): depthwise causal conv1d over [B, C, L]
// with weight [C, 1, k], optional bias [C], a carried state [B, C, k-1]
// (zeros when absent) and optional fused SiLU; present_state is the last
// k-1 positions of concat(past_state, input).
#include <algorithm>
#include <cmath>

#include "core/parallel.h"
#include "ops/transformer/causal_conv_math.h"
#include "ops/transformer/linear_attention_geom.h"
#include "ops/transformer/tx_common.h"

namespace twinfer::tx {
namespace {

// ---- LinearAttention ---------------------------------------------------------

void infer_linear_attention(InferContext& c) {
  const graph::Node& n = c.node();
  const DType dt = c.input_dtype(0);
  if (!(ew::in_typeset(ew::kFloatTypes, dt) && dt != DType::kFloat64))
    c.fail(ErrorKind::kDType, std::string("LinearAttention needs float16/bfloat16/float32, got ") + dtype_name(dt));
  if (!(c.num_inputs() >= 3 && c.has_input(1) && c.has_input(2)))
    c.fail(ErrorKind::kModelFormat, "LinearAttention needs query, key and value");
  for (size_t i : {1, 2, 4, 5}) check_same_dtype_as(c, i, dt);
  const LinAttnRule rule = parse_rule(n);
  if (!(c.has_input(4) == rule.gating))
    c.fail(ErrorKind::kModelFormat,
           std::string("update_rule '") + n.attr_string("update_rule", "gated_delta") +
               (rule.gating ? "' needs the decay input" : "' takes no decay input"));
  if (!(c.has_input(5) == rule.delta))
    c.fail(ErrorKind::kModelFormat,
           std::string("update_rule '") + n.attr_string("update_rule", "gated_delta") +
               (rule.delta ? "' needs the beta input" : "' takes no beta input"));
  const int64_t hq = n.attr_int("q_num_heads", 0), hkv = n.attr_int("kv_num_heads", 0);
  if (!(hq > 0 && hkv > 0 && hq % hkv == 0))
    c.fail(ErrorKind::kModelFormat,
           "q_num_heads (" + std::to_string(hq) + ") must be a positive multiple of kv_num_heads (" +
               std::to_string(hkv) + ")");
  const DType st = c.has_input(3) ? c.input_dtype(3) : dt;
  if (!(ew::in_typeset(ew::kFloatTypes, st) && st != DType::kFloat64))
    c.fail(ErrorKind::kDType, std::string("past_state must be float16/bfloat16/float32, got ") + dtype_name(st));
  if (!c.input_has_shape(0) || !c.input_has_shape(2)) {
    c.set_output_rank_unknown(0, dt);
    if (c.num_outputs() > 1) c.set_output(1, st, SymShape(4));
    return;
  }
  const SymShape& q = c.input_shape(0);
  const SymShape& v = c.input_shape(2);
  if (!(q.size() == 3 && v.size() == 3))
    c.fail(ErrorKind::kShape,
           "query and value must be 3-D [B, T, H*D], got " + sym_shape_str(q) + " and " + sym_shape_str(v));
  if (!(!q[2].known() || q[2].value % hq == 0))
    c.fail(ErrorKind::kShape, "query hidden size " + q[2].str() + " is not a multiple of q_num_heads");
  if (!(!v[2].known() || v[2].value % hkv == 0))
    c.fail(ErrorKind::kShape, "value hidden size " + v[2].str() + " is not a multiple of kv_num_heads");
  const Dim dk = q[2].known() ? Dim(q[2].value / hq) : Dim();
  const Dim dv = v[2].known() ? Dim(v[2].value / hkv) : Dim();
  c.set_output(0, dt, SymShape{q[0], q[1], dv.known() ? Dim(dv.value * hq) : Dim()});
  if (c.num_outputs() > 1) c.set_output(1, st, SymShape{q[0], Dim(hkv), dk, dv});
}

TWINFER_REGISTER_SCHEMA("LinearAttention", infer_linear_attention);

class LinearAttentionKernel final : public Kernel {
 public:
  explicit LinearAttentionKernel(const KernelBuildInfo& info)
      : g_(linear_attention_geom(info)), state_dtype_(linattn_state_dtype(info)) {}
  const char* impl_name() const override { return "cpu loop"; }

  void run(KernelContext& ctx) const override {
    dispatch_any_float(ctx.inputs[0].dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      dispatch_any_float(state_dtype_, [&](auto stag) {
        using S = typename decltype(stag)::type;
        compute<T, S>(ctx);
      });
    });
  }

 private:
  template <typename T, typename S>
  void compute(KernelContext& ctx) const {
    const T* Q = ctx.inputs[0].as<T>();
    const T* K = ctx.inputs[1].as<T>();
    const T* V = ctx.inputs[2].as<T>();
    const S* past = ctx.inputs.size() > 3 && ctx.inputs[3].data ? ctx.inputs[3].as<S>() : nullptr;
    const T* G = g_.rule.gating ? ctx.inputs[4].as<T>() : nullptr;
    const T* Bt = g_.rule.delta ? ctx.inputs[5].as<T>() : nullptr;
    T* Y = ctx.outputs[0].as<T>();
    // present_state is optional (a node may have only output 0): the state then
    // lives only in the per-thread buffer, as on CUDA (scratch).
    S* present = ctx.outputs.size() > 1 && ctx.outputs[1].data ? ctx.outputs[1].as<S>() : nullptr;
    const int64_t Hq = g_.Hq, Hkv = g_.Hkv, Tn = g_.T, dk = g_.dk, dv = g_.dv, group = Hq / Hkv;
    const int64_t beta_last_ = g_.beta_last;
    const bool decay_per_dim_ = g_.decay_per_dim;
    const float scale = g_.scale;
    parallel_for(g_.B * Hkv, ctx.num_threads, 1, [&](int64_t lo, int64_t hi) {
      float* st = thread_buffer<float>(dk * dv, 0);
      float* kv = thread_buffer<float>(dk + 2 * dv, 1);
      float* kf = kv;
      float* vf = kv + dk;
      float* tmp = kv + dk + dv;
      for (int64_t bh = lo; bh < hi; ++bh) {
        const int64_t b = bh / Hkv, h = bh % Hkv;
        if (past) {
          for (int64_t i = 0; i < dk * dv; ++i) st[i] = static_cast<float>(load(past[bh * dk * dv + i]));
        } else {
          std::fill(st, st + dk * dv, 0.f);
        }
        for (int64_t t = 0; t < Tn; ++t) {
          const int64_t bt = b * Tn + t;
          const T* kr = K + (bt * Hkv + h) * dk;
          const T* vr = V + (bt * Hkv + h) * dv;
          for (int64_t d = 0; d < dk; ++d) kf[d] = static_cast<float>(load(kr[d]));
          for (int64_t m = 0; m < dv; ++m) vf[m] = static_cast<float>(load(vr[m]));
          if (G) {
            if (decay_per_dim_) {
              const T* g = G + (bt * Hkv + h) * dk;
              for (int64_t d = 0; d < dk; ++d) {
                const float e = std::exp(static_cast<float>(load(g[d])));
                for (int64_t m = 0; m < dv; ++m) st[d * dv + m] *= e;
              }
            } else {
              const float e = std::exp(static_cast<float>(load(G[bt * Hkv + h])));
              for (int64_t i = 0; i < dk * dv; ++i) st[i] *= e;
            }
          }
          if (Bt) {
            const float beta = static_cast<float>(load(Bt[bt * beta_last_ + (beta_last_ == 1 ? 0 : h)]));
            std::fill(tmp, tmp + dv, 0.f);
            for (int64_t d = 0; d < dk; ++d)
              for (int64_t m = 0; m < dv; ++m) tmp[m] += st[d * dv + m] * kf[d];
            for (int64_t m = 0; m < dv; ++m) vf[m] = beta * (vf[m] - tmp[m]);
          }
          for (int64_t d = 0; d < dk; ++d)
            for (int64_t m = 0; m < dv; ++m) st[d * dv + m] += kf[d] * vf[m];
          for (int64_t g = 0; g < group; ++g) {
            const int64_t qh = h * group + g;
            const T* qr = Q + (bt * Hq + qh) * dk;
            std::fill(tmp, tmp + dv, 0.f);
            for (int64_t d = 0; d < dk; ++d) {
              const float qd = static_cast<float>(load(qr[d]));
              for (int64_t m = 0; m < dv; ++m) tmp[m] += qd * st[d * dv + m];
            }
            T* yr = Y + (bt * Hq + qh) * dv;
            for (int64_t m = 0; m < dv; ++m) yr[m] = store<T>(scale * tmp[m]);
          }
        }
        if (present)
          for (int64_t i = 0; i < dk * dv; ++i) present[bh * dk * dv + i] = store<S>(st[i]);
      }
    });
  }

  LinAttnGeom g_;
  DType state_dtype_;
};

bool linattn_supports(const KernelBuildInfo& info, std::string* why) {
  if (!float_inputs(info, {1, 2, 4, 5}, why)) return false;
  for (DType d : {info.input_dtype(0), linattn_state_dtype(info)})
    if (!ew::in_typeset(ew::kFloatTypes, d) || d == DType::kFloat64) {
      *why = std::string("LinearAttention supports float16/bfloat16/float32, not ") + dtype_name(d);
      return false;
    }
  if (linattn_has_present(info) && info.has_input(3) && info.input_dtype(3) != info.output(1).dtype) {
    *why = "present_state dtype differs from past_state";
    return false;
  }
  return true;
}

TWINFER_REGISTER_KERNEL("LinearAttention", Backend::kCPU, 0, linattn_supports, make_kernel<LinearAttentionKernel>);

// ---- CausalConvWithState -------------------------------------------------------

void infer_causal_conv(InferContext& c) {
  const DType dt = c.input_dtype(0);
  if (!(ew::in_typeset(ew::kFloatTypes, dt)))
    c.fail(ErrorKind::kDType, std::string("CausalConvWithState needs a float input, got ") + dtype_name(dt));
  if (!(c.num_inputs() >= 2 && c.has_input(1)))
    c.fail(ErrorKind::kModelFormat, "CausalConvWithState needs input and weight");
  for (size_t i : {1, 2, 3}) check_same_dtype_as(c, i, dt);
  causal_conv_parse_silu(c.node());
  if (!c.input_has_shape(0) || !c.input_has_shape(1)) {
    c.set_output_rank_unknown(0, dt);
    if (c.num_outputs() > 1) c.set_output(1, dt, SymShape(3));
    return;
  }
  const SymShape& x = c.input_shape(0);
  const SymShape& w = c.input_shape(1);
  if (!(x.size() == 3)) c.fail(ErrorKind::kShape, "input must be [B, C, L], got " + sym_shape_str(x));
  if (!(w.size() == 3 && dims_compatible(w[0], x[1]) && dims_compatible(w[1], Dim(1))))
    c.fail(ErrorKind::kShape, "weight must be [C, 1, k], got " + sym_shape_str(w) + " for input " + sym_shape_str(x));
  if (!(!w[2].known() || w[2].value >= 1)) c.fail(ErrorKind::kShape, "kernel size must be >= 1");
  c.set_output(0, dt, x);
  if (c.num_outputs() > 1) c.set_output(1, dt, SymShape{x[0], x[1], w[2].known() ? Dim(w[2].value - 1) : Dim()});
}

TWINFER_REGISTER_SCHEMA("CausalConvWithState", infer_causal_conv);

class CausalConvKernel final : public Kernel {
 public:
  explicit CausalConvKernel(const KernelBuildInfo& info) : g_(causal_conv_geom(info)) {}
  const char* impl_name() const override { return "cpu loop"; }

  void run(KernelContext& ctx) const override {
    dispatch_any_float(ctx.inputs[0].dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = ctx.inputs[0].as<T>();
      const T* w = ctx.inputs[1].as<T>();
      const T* bias = g_.has_bias ? ctx.inputs[2].as<T>() : nullptr;
      const T* past = g_.has_past ? ctx.inputs[3].as<T>() : nullptr;
      T* y = ctx.outputs[0].as<T>();
      T* pres = g_.has_present ? ctx.outputs[1].as<T>() : nullptr;
      const int64_t L = g_.L, K = g_.K, P = g_.K - 1, C = g_.C;
      parallel_for(g_.B * C, ctx.num_threads, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, L * K)),
                   [&](int64_t lo, int64_t hi) {
        for (int64_t bc = lo; bc < hi; ++bc) {
          const int64_t c = bc % C;
          const T* xr = x + bc * L;
          const T* pr = past ? past + bc * P : nullptr;
          // present_state first: y may alias nothing, but x is read below.
          if (pres)
            for (int64_t p = 0; p < P; ++p) pres[bc * P + p] = store<T>(causal_conv_padded(xr, pr, P, L + p));
          T* yr = y + bc * L;
          for (int64_t l = 0; l < L; ++l)
            yr[l] = causal_conv_at(xr, pr, w + c * K, bias ? bias + c : nullptr, K, g_.silu, l);
        }
      });
    });
  }

 private:
  CausalConvGeom g_;
};

bool conv_supports(const KernelBuildInfo& info, std::string* why) { return float_inputs(info, {1, 2, 3}, why); }

TWINFER_REGISTER_KERNEL("CausalConvWithState", Backend::kCPU, 0, conv_supports, make_kernel<CausalConvKernel>);

}  // namespace
}  // namespace twinfer::tx
