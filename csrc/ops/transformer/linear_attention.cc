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
#include "ops/transformer/tx_common.h"

namespace twinfer::tx {
namespace {

// ---- LinearAttention ---------------------------------------------------------

struct LinAttnRule {
  bool gating = false, delta = false;
};

LinAttnRule parse_rule(const graph::Node& n) {
  const std::string r = n.attr_string("update_rule", "gated_delta");
  if (r == "linear") return {false, false};
  if (r == "gated") return {true, false};
  if (r == "delta") return {false, true};
  if (r == "gated_delta") return {true, true};
  throw Error(ErrorKind::kModelFormat,
              "update_rule '" + r + "' is not one of linear, gated, delta, gated_delta", n.name, n.op_type);
}

void infer_linear_attention(InferContext& c) {
  const graph::Node& n = c.node();
  const DType dt = c.input_dtype(0);
  c.check(ew::in_typeset(ew::kFloatTypes, dt) && dt != DType::kFloat64, ErrorKind::kDType,
          std::string("LinearAttention needs float16/bfloat16/float32, got ") + dtype_name(dt));
  c.check(c.num_inputs() >= 3 && c.has_input(1) && c.has_input(2), ErrorKind::kModelFormat,
          "LinearAttention needs query, key and value");
  for (size_t i : {1, 2, 4, 5}) check_same_dtype_as(c, i, dt);
  const LinAttnRule rule = parse_rule(n);
  c.check(c.has_input(4) == rule.gating, ErrorKind::kModelFormat,
          std::string("update_rule '") + n.attr_string("update_rule", "gated_delta") +
              (rule.gating ? "' needs the decay input" : "' takes no decay input"));
  c.check(c.has_input(5) == rule.delta, ErrorKind::kModelFormat,
          std::string("update_rule '") + n.attr_string("update_rule", "gated_delta") +
              (rule.delta ? "' needs the beta input" : "' takes no beta input"));
  const int64_t hq = n.attr_int("q_num_heads", 0), hkv = n.attr_int("kv_num_heads", 0);
  c.check(hq > 0 && hkv > 0 && hq % hkv == 0, ErrorKind::kModelFormat,
          "q_num_heads (" + std::to_string(hq) + ") must be a positive multiple of kv_num_heads (" +
              std::to_string(hkv) + ")");
  const DType st = c.has_input(3) ? c.input_dtype(3) : dt;
  c.check(ew::in_typeset(ew::kFloatTypes, st) && st != DType::kFloat64, ErrorKind::kDType,
          std::string("past_state must be float16/bfloat16/float32, got ") + dtype_name(st));
  if (!c.input_has_shape(0) || !c.input_has_shape(2)) {
    c.set_output_rank_unknown(0, dt);
    if (c.num_outputs() > 1) c.set_output(1, st, SymShape(4));
    return;
  }
  const SymShape& q = c.input_shape(0);
  const SymShape& v = c.input_shape(2);
  c.check(q.size() == 3 && v.size() == 3, ErrorKind::kShape,
          "query and value must be 3-D [B, T, H*D], got " + sym_shape_str(q) + " and " + sym_shape_str(v));
  c.check(!q[2].known() || q[2].value % hq == 0, ErrorKind::kShape,
          "query hidden size " + q[2].str() + " is not a multiple of q_num_heads");
  c.check(!v[2].known() || v[2].value % hkv == 0, ErrorKind::kShape,
          "value hidden size " + v[2].str() + " is not a multiple of kv_num_heads");
  const Dim dk = q[2].known() ? Dim(q[2].value / hq) : Dim();
  const Dim dv = v[2].known() ? Dim(v[2].value / hkv) : Dim();
  c.set_output(0, dt, SymShape{q[0], q[1], dv.known() ? Dim(dv.value * hq) : Dim()});
  if (c.num_outputs() > 1) c.set_output(1, st, SymShape{q[0], Dim(hkv), dk, dv});
}

TWINFER_REGISTER_SCHEMA("LinearAttention", infer_linear_attention);

class LinearAttentionKernel final : public Kernel {
 public:
  explicit LinearAttentionKernel(const KernelBuildInfo& info) : rule_(parse_rule(info.node())) {
    const graph::Node& n = info.node();
    Hq_ = n.attr_int("q_num_heads", 0);
    Hkv_ = n.attr_int("kv_num_heads", 0);
    if (Hq_ <= 0 || Hkv_ <= 0 || Hq_ % Hkv_)
      info.fail(ErrorKind::kModelFormat, "q_num_heads must be a positive multiple of kv_num_heads");
    Shape q = info.input_shape(0), k = info.input_shape(1), v = info.input_shape(2);
    if (q.size() != 3 || k.size() != 3 || v.size() != 3)
      info.fail(ErrorKind::kShape, "query, key, value must be 3-D");
    B_ = q[0];
    T_ = q[1];
    if (q[2] % Hq_ || k[2] % Hkv_ || v[2] % Hkv_)
      info.fail(ErrorKind::kShape, "hidden sizes are not multiples of the head counts");
    dk_ = q[2] / Hq_;
    dv_ = v[2] / Hkv_;
    if (k != Shape{B_, T_, Hkv_ * dk_} || v[0] != B_ || v[1] != T_)
      info.fail(ErrorKind::kShape, "key " + shape_str(k) + " / value " + shape_str(v) + " do not match query " +
                                       shape_str(q));
    if (info.has_input(3) && info.input_shape(3) != Shape{B_, Hkv_, dk_, dv_})
      info.fail(ErrorKind::kShape, "past_state " + shape_str(info.input_shape(3)) + " must be " +
                                       shape_str(Shape{B_, Hkv_, dk_, dv_}));
    if (rule_.gating != info.has_input(4) || rule_.delta != info.has_input(5))
      info.fail(ErrorKind::kModelFormat, "decay / beta inputs do not match update_rule");
    if (rule_.gating) {
      Shape d = info.input_shape(4);
      if (d.size() != 3 || d[0] != B_ || d[1] != T_ || (d[2] != Hkv_ && d[2] != Hkv_ * dk_))
        info.fail(ErrorKind::kShape, "decay " + shape_str(d) + " must be [B, T, kv_num_heads] or [B, T, kv_num_heads*d_k]");
      decay_per_dim_ = d[2] == Hkv_ * dk_ && !(Hkv_ * dk_ == Hkv_);
    }
    if (rule_.delta) {
      Shape b = info.input_shape(5);
      if (b.size() != 3 || b[0] != B_ || b[1] != T_ || (b[2] != Hkv_ && b[2] != 1))
        info.fail(ErrorKind::kShape, "beta " + shape_str(b) + " must be [B, T, kv_num_heads] or [B, T, 1]");
      beta_last_ = b[2];
    }
    const float s = n.attr_float("scale", 0.f);
    scale_ = s == 0.f ? 1.f / std::sqrt(static_cast<float>(dk_)) : s;
  }
  const char* impl_name() const override { return "cpu loop"; }

  void run(KernelContext& ctx) const override {
    dispatch_any_float(ctx.inputs[0].dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const DType sdt = ctx.outputs[1].dtype;
      dispatch_any_float(sdt, [&](auto stag) {
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
    const T* G = rule_.gating ? ctx.inputs[4].as<T>() : nullptr;
    const T* Bt = rule_.delta ? ctx.inputs[5].as<T>() : nullptr;
    T* Y = ctx.outputs[0].as<T>();
    S* present = ctx.outputs[1].as<S>();
    const int64_t Hq = Hq_, Hkv = Hkv_, Tn = T_, dk = dk_, dv = dv_, group = Hq / Hkv;
    const float scale = scale_;
    parallel_for(B_ * Hkv, ctx.num_threads, 1, [&](int64_t lo, int64_t hi) {
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
        for (int64_t i = 0; i < dk * dv; ++i) present[bh * dk * dv + i] = store<S>(st[i]);
      }
    });
  }

  LinAttnRule rule_;
  int64_t Hq_ = 0, Hkv_ = 0, B_ = 0, T_ = 0, dk_ = 0, dv_ = 0, beta_last_ = 1;
  bool decay_per_dim_ = false;
  float scale_ = 1.f;
};

bool linattn_supports(const KernelBuildInfo& info, std::string* why) {
  if (!float_inputs(info, {1, 2, 4, 5}, why)) return false;
  for (DType d : {info.input_dtype(0), info.output(1).dtype})
    if (d == DType::kFloat64) {
      *why = "LinearAttention supports float16/bfloat16/float32, not float64";
      return false;
    }
  if (info.has_input(3) && info.input_dtype(3) != info.output(1).dtype) {
    *why = "present_state dtype differs from past_state";
    return false;
  }
  return true;
}

TWINFER_REGISTER_KERNEL("LinearAttention", Backend::kCPU, 0, linattn_supports, make_kernel<LinearAttentionKernel>);

// ---- CausalConvWithState -------------------------------------------------------

bool parse_silu(const graph::Node& n) {
  const std::string a = n.attr_string("activation", "none");
  if (a == "none") return false;
  if (a == "silu" || a == "swish") return true;
  throw Error(ErrorKind::kModelFormat, "activation '" + a + "' is not one of none, silu, swish", n.name, n.op_type);
}

void infer_causal_conv(InferContext& c) {
  const DType dt = c.input_dtype(0);
  c.check(ew::in_typeset(ew::kFloatTypes, dt), ErrorKind::kDType,
          std::string("CausalConvWithState needs a float input, got ") + dtype_name(dt));
  c.check(c.num_inputs() >= 2 && c.has_input(1), ErrorKind::kModelFormat, "CausalConvWithState needs input and weight");
  for (size_t i : {1, 2, 3}) check_same_dtype_as(c, i, dt);
  parse_silu(c.node());
  if (!c.input_has_shape(0) || !c.input_has_shape(1)) {
    c.set_output_rank_unknown(0, dt);
    if (c.num_outputs() > 1) c.set_output(1, dt, SymShape(3));
    return;
  }
  const SymShape& x = c.input_shape(0);
  const SymShape& w = c.input_shape(1);
  c.check(x.size() == 3, ErrorKind::kShape, "input must be [B, C, L], got " + sym_shape_str(x));
  c.check(w.size() == 3 && dims_compatible(w[0], x[1]) && dims_compatible(w[1], Dim(1)), ErrorKind::kShape,
          "weight must be [C, 1, k], got " + sym_shape_str(w) + " for input " + sym_shape_str(x));
  c.check(!w[2].known() || w[2].value >= 1, ErrorKind::kShape, "kernel size must be >= 1");
  c.set_output(0, dt, x);
  if (c.num_outputs() > 1) c.set_output(1, dt, SymShape{x[0], x[1], w[2].known() ? Dim(w[2].value - 1) : Dim()});
}

TWINFER_REGISTER_SCHEMA("CausalConvWithState", infer_causal_conv);

class CausalConvKernel final : public Kernel {
 public:
  explicit CausalConvKernel(const KernelBuildInfo& info) : silu_(parse_silu(info.node())) {
    Shape x = info.input_shape(0), w = info.input_shape(1);
    if (x.size() != 3) info.fail(ErrorKind::kShape, "input must be [B, C, L], got " + shape_str(x));
    B_ = x[0];
    C_ = x[1];
    L_ = x[2];
    if (w.size() != 3 || w[0] != C_ || w[1] != 1 || w[2] < 1)
      info.fail(ErrorKind::kShape, "weight " + shape_str(w) + " must be [" + std::to_string(C_) + ", 1, k]");
    K_ = w[2];
    has_bias_ = info.has_input(2);
    if (has_bias_ && info.input_shape(2) != Shape{C_})
      info.fail(ErrorKind::kShape, "bias " + shape_str(info.input_shape(2)) + " must be [" + std::to_string(C_) + "]");
    has_past_ = info.has_input(3);
    if (has_past_ && info.input_shape(3) != Shape{B_, C_, K_ - 1})
      info.fail(ErrorKind::kShape, "past_state " + shape_str(info.input_shape(3)) + " must be " +
                                       shape_str(Shape{B_, C_, K_ - 1}));
    has_present_ = info.num_outputs() > 1 && info.has_output(1);
  }
  const char* impl_name() const override { return "cpu loop"; }

  void run(KernelContext& ctx) const override {
    dispatch_any_float(ctx.inputs[0].dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = compute_t<T>;
      const T* x = ctx.inputs[0].as<T>();
      const T* w = ctx.inputs[1].as<T>();
      const T* bias = has_bias_ ? ctx.inputs[2].as<T>() : nullptr;
      const T* past = has_past_ ? ctx.inputs[3].as<T>() : nullptr;
      T* y = ctx.outputs[0].as<T>();
      T* pres = has_present_ ? ctx.outputs[1].as<T>() : nullptr;
      const int64_t L = L_, K = K_, P = K_ - 1;
      parallel_for(B_ * C_, ctx.num_threads, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, L * K)),
                   [&](int64_t lo, int64_t hi) {
        for (int64_t bc = lo; bc < hi; ++bc) {
          const int64_t c = bc % C_;
          const T* xr = x + bc * L;
          const T* pr = past ? past + bc * P : nullptr;
          const T* wr = w + c * K;
          // padded[p] for p in [0, P + L): the carried state then the input.
          auto padded = [&](int64_t p) -> C {
            if (p >= P) return load(xr[p - P]);
            return pr ? C(load(pr[p])) : C(0);
          };
          // present_state first: y may alias nothing, but x is read below.
          if (pres)
            for (int64_t p = 0; p < P; ++p) pres[bc * P + p] = store<T>(padded(L + p));
          T* yr = y + bc * L;
          for (int64_t l = 0; l < L; ++l) {
            C acc = bias ? C(load(bias[c])) : C(0);
            for (int64_t i = 0; i < K; ++i) acc += C(load(wr[i])) * padded(l + i);
            if (silu_) {
              const C v = load(store<T>(acc));  // the conv result in T, then SiLU in float
              acc = v / (C(1) + std::exp(-v));
            }
            yr[l] = store<T>(acc);
          }
        }
      });
    });
  }

 private:
  bool silu_;
  bool has_bias_ = false, has_past_ = false, has_present_ = false;
  int64_t B_ = 0, C_ = 0, L_ = 0, K_ = 1;
};

bool conv_supports(const KernelBuildInfo& info, std::string* why) { return float_inputs(info, {1, 2, 3}, why); }

TWINFER_REGISTER_KERNEL("CausalConvWithState", Backend::kCPU, 0, conv_supports, make_kernel<CausalConvKernel>);

}  // namespace
}  // namespace twinfer::tx
