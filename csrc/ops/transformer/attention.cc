// Attention (opset 23 / 24 / 25): scaled dot-product attention with
// multi-head, grouped-query and multi-query heads, 3-D ([B, S, H*D]) or 4-D
// ([B, H, S, D]) inputs, a KV cache kept inside the op (past / present key and
// value) or outside it (nonpad_kv_seqlen, opset 24), boolean or additive
// masks broadcast onto [B, Hq, Sq, S], bottom-right causal masking, sliding
// windows (opset 25), softcap, and the qk_matmul_output debug output in its
// four modes.
//
// The kernel works one query row at a time (rows threaded): scores against
// every key, softcap, the additive bias (mask + causal + window + padding),
// a max-subtracted softmax, then the weighted sum of the value rows. A row
// whose bias is -inf everywhere has no attendable key and gives zeros (the
// opset 23 errata), never NaN. 16-bit inputs are computed in float and the
// probabilities rounded to the input type before the value product, as the
// ONNX function body does.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/parallel.h"
#include "graph/domains.h"
#include "ops/transformer/attention_math.h"
#include "ops/transformer/attention_spec.h"
#include "ops/transformer/attention_views.h"
#include "ops/transformer/tx_common.h"

namespace twinfer::tx {
namespace {

bool has_in(const graph::Node& n, size_t i) { return i < n.inputs.size() && n.inputs[i] >= 0; }

// With views (attention_views.h): the sizes come from the views; only
// q, k, v, an optional mask and the output.
void infer_viewed(InferContext& c, const AttnViews& views, DType dt) {
  AttnDims d;
  std::string why = attention_view_dims(views, &d);
  if (!(why.empty())) c.fail(ErrorKind::kModelFormat, why);
  for (size_t i = 4; i < c.num_inputs(); ++i)
    if (!(!c.has_input(i))) c.fail(ErrorKind::kModelFormat, "Attention with views takes no input after the mask");
  for (size_t i = 1; i < c.num_outputs(); ++i)
    if (!(!c.has_output(i))) c.fail(ErrorKind::kModelFormat, "Attention with views has one output");
  if (c.input_has_shape(0) && c.input_has_shape(1) && c.input_has_shape(2)) {
    int64_t numel[3];
    bool known = true;
    for (int i = 0; i < 3; ++i) {
      const SymShape& s = c.input_shape(i);
      known = known && sym_shape_known(s);
      if (known) numel[i] = shape_numel(sym_shape_values(s));
    }
    if (known) {
      why = attention_views_fit(views, d, numel);
      if (!(why.empty())) c.fail(ErrorKind::kModelFormat, why);
    }
  }
  if (views.has_out) c.set_output(0, dt, sym_shape_from(Shape(views.out_shape.begin(), views.out_shape.end())));
  else c.set_output(0, dt, sym_shape_from(Shape{d.B, d.Hq, d.Sq, d.Dv}));
}

void infer_attention(InferContext& c) {
  const graph::Node& n = c.node();
  const DType dt = c.input_dtype(0);
  if (!(ew::in_typeset(ew::kFloatTypes, dt)))
    c.fail(ErrorKind::kDType, std::string("Attention needs float Q, got ") + dtype_name(dt));
  if (!(c.num_inputs() >= 3 && c.has_input(1) && c.has_input(2)))
    c.fail(ErrorKind::kModelFormat, "Attention needs Q, K and V");
  check_same_dtype_as(c, 1, dt);
  check_same_dtype_as(c, 2, dt);
  check_same_dtype_as(c, 4, dt);
  check_same_dtype_as(c, 5, dt);
  if (c.has_input(3)) {
    DType m = c.input_dtype(3);
    if (!(m == DType::kBool || ew::in_typeset(ew::kFloatTypes, m)))
      c.fail(ErrorKind::kDType, std::string("attn_mask must be bool or float, got ") + dtype_name(m));
  }
  if (c.has_input(6))
    if (!(c.input_dtype(6) == DType::kInt64 || c.input_dtype(6) == DType::kInt32))
      c.fail(ErrorKind::kDType, "nonpad_kv_seqlen must be int64");
  if (!(c.has_input(4) == c.has_input(5)))
    c.fail(ErrorKind::kModelFormat, "past_key and past_value must be given together");
  const int nout = static_cast<int>(c.num_outputs());
  AttnViews views;
  const std::string bad = read_attention_views(n, &views);
  if (!(bad.empty())) c.fail(ErrorKind::kModelFormat, bad);
  if (views.any()) return infer_viewed(c, views, dt);
  if (!c.input_has_shape(0) || !c.input_has_shape(1) || !c.input_has_shape(2)) {
    for (int i = 0; i < nout; ++i)
      if (c.has_output(i)) c.set_output_rank_unknown(i, dt);
    return;
  }
  const SymShape& q = c.input_shape(0);
  const SymShape& k = c.input_shape(1);
  const SymShape& v = c.input_shape(2);
  if (!((q.size() == 3 || q.size() == 4) && k.size() == q.size() && v.size() == q.size()))
    c.fail(ErrorKind::kShape,
           "Q, K, V must all be 3-D or all 4-D, got " + sym_shape_str(q) + ", " + sym_shape_str(k) + ", " +
               sym_shape_str(v));
  const bool in3d = q.size() == 3;
  Dim B = q[0], Hq, Hkv, Sq, Skv, Dv;
  if (in3d) {
    if (!(n.has_attr("q_num_heads") && n.has_attr("kv_num_heads")))
      c.fail(ErrorKind::kModelFormat, "3-D Attention inputs need the q_num_heads and kv_num_heads attributes");
    const int64_t hq = n.attr_int("q_num_heads", 0), hkv = n.attr_int("kv_num_heads", 0);
    if (!(hq > 0 && hkv > 0)) c.fail(ErrorKind::kModelFormat, "q_num_heads and kv_num_heads must be positive");
    Hq = Dim(hq);
    Hkv = Dim(hkv);
    Sq = q[1];
    Skv = k[1];
    for (const SymShape* s : {&q, &k, &v}) {
      const Dim& h = (*s)[2];
      const int64_t heads = s == &q ? hq : hkv;
      if (!(!h.known() || h.value % heads == 0))
        c.fail(ErrorKind::kShape,
               "hidden size " + h.str() + " is not a multiple of the head count " + std::to_string(heads));
    }
    Dv = v[2].known() ? Dim(v[2].value / hkv) : Dim();
  } else {
    Hq = q[1];
    Hkv = k[1];
    Sq = q[2];
    Skv = k[2];
    Dv = v[3];
    if (!(dims_compatible(k[3], q[3])))
      c.fail(ErrorKind::kShape, "Q and K head sizes differ: " + sym_shape_str(q) + " vs " + sym_shape_str(k));
  }
  if (!(dims_compatible(k[0], B) && dims_compatible(v[0], B)))
    c.fail(ErrorKind::kShape, "Q, K, V batch sizes differ");
  if (!(dims_compatible(in3d ? v[1] : v[2], Skv))) c.fail(ErrorKind::kShape, "K and V sequence lengths differ");
  if (!in3d) if (!(dims_compatible(v[1], Hkv))) c.fail(ErrorKind::kShape, "K and V head counts differ");
  if (Hq.known() && Hkv.known())
    if (!(Hkv.value > 0 && Hq.value % Hkv.value == 0))
      c.fail(ErrorKind::kShape, "q heads (" + Hq.str() + ") must be a multiple of kv heads (" + Hkv.str() + ")");
  Dim Dk = in3d ? (k[2].known() ? Dim(k[2].value / Hkv.value) : Dim()) : k[3];
  Dim S = Skv;
  if (c.has_input(4) && c.input_has_shape(4)) {
    const SymShape& pk = c.input_shape(4);
    if (!(pk.size() == 4)) c.fail(ErrorKind::kShape, "past_key must be 4-D, got " + sym_shape_str(pk));
    S = (pk[2].known() && Skv.known()) ? Dim(pk[2].value + Skv.value) : Dim();
  } else if (c.has_input(4)) {
    S = Dim();
  }
  if (c.has_output(0)) {
    SymShape y;
    if (in3d) y = {B, Sq, (Hq.known() && Dv.known()) ? Dim(Hq.value * Dv.value) : Dim()};
    else y = {B, Hq, Sq, Dv};
    c.set_output(0, dt, y);
  }
  if (nout > 1 && c.has_output(1)) c.set_output(1, dt, SymShape{B, Hkv, S, Dk});
  if (nout > 2 && c.has_output(2)) c.set_output(2, dt, SymShape{B, Hkv, S, Dv});
  if (nout > 3 && c.has_output(3)) c.set_output(3, dt, SymShape{B, Hq, Sq, S});
}

TWINFER_REGISTER_SCHEMA("Attention", infer_attention);
TWINFER_REGISTER_SCHEMA("Attention", infer_attention, kTwinferDomain);

}  // namespace

AttentionSpec::AttentionSpec(const KernelBuildInfo& info) {
    const graph::Node& n = info.node();
    AttnViews views;
    if (std::string bad = read_attention_views(n, &views); !bad.empty()) info.fail(ErrorKind::kModelFormat, bad);
    Shape q, k, v;
    if (views.any()) {
      if (std::string why = check_attention_views(info, views); !why.empty()) info.fail(ErrorKind::kModelFormat, why);
      q = Shape(views.in[0].dims, views.in[0].dims + 4);
      k = Shape(views.in[1].dims, views.in[1].dims + 4);
      v = Shape(views.in[2].dims, views.in[2].dims + 4);
    } else {
      q = info.input_shape(0), k = info.input_shape(1), v = info.input_shape(2);
    }
    if (!((q.size() == 3 || q.size() == 4) && k.size() == q.size() && v.size() == q.size()))
      info.fail(ErrorKind::kShape, "Q, K, V must all be 3-D or all 4-D, got " + shape_str(q) + ", " +
                                       shape_str(k) + ", " + shape_str(v));
    in3d_ = q.size() == 3;
    B_ = q[0];
    if (in3d_) {
      Hq_ = n.attr_int("q_num_heads", 0);
      Hkv_ = n.attr_int("kv_num_heads", 0);
      if (Hq_ <= 0 || Hkv_ <= 0) info.fail(ErrorKind::kModelFormat, "3-D inputs need q_num_heads and kv_num_heads");
      if (q[2] % Hq_ || k[2] % Hkv_ || v[2] % Hkv_)
        info.fail(ErrorKind::kShape, "hidden sizes " + shape_str(q) + ", " + shape_str(k) + ", " + shape_str(v) +
                                         " are not multiples of the head counts");
      Sq_ = q[1];
      Skv_ = k[1];
      D_ = q[2] / Hq_;
      if (k[2] / Hkv_ != D_)
        info.fail(ErrorKind::kShape, "Q and K head sizes differ: " + shape_str(q) + " vs " + shape_str(k));
      Dv_ = v[2] / Hkv_;
      if (v[1] != Skv_) info.fail(ErrorKind::kShape, "K and V sequence lengths differ");
    } else {
      Hq_ = q[1];
      Hkv_ = k[1];
      Sq_ = q[2];
      Skv_ = k[2];
      D_ = q[3];
      Dv_ = v[3];
      if (k[3] != D_) info.fail(ErrorKind::kShape, "Q and K head sizes differ: " + shape_str(q) + " vs " + shape_str(k));
      if (v[1] != Hkv_ || v[2] != Skv_)
        info.fail(ErrorKind::kShape, "K " + shape_str(k) + " and V " + shape_str(v) + " disagree");
    }
    if (k[0] != B_ || v[0] != B_) info.fail(ErrorKind::kShape, "Q, K, V batch sizes differ");
    if (Hkv_ <= 0 || Hq_ % Hkv_ != 0)
      info.fail(ErrorKind::kShape, "q heads (" + std::to_string(Hq_) + ") must be a multiple of kv heads (" +
                                       std::to_string(Hkv_) + ")");
    has_past_ = info.has_input(4);
    if (has_past_ != info.has_input(5))
      info.fail(ErrorKind::kModelFormat, "past_key and past_value must be given together");
    if (has_past_) {
      Shape pk = info.input_shape(4), pv = info.input_shape(5);
      if (pk.size() != 4 || pk[0] != B_ || pk[1] != Hkv_ || pk[3] != D_)
        info.fail(ErrorKind::kShape, "past_key " + shape_str(pk) + " must be [" + std::to_string(B_) + ", " +
                                         std::to_string(Hkv_) + ", past, " + std::to_string(D_) + "]");
      Spast_ = pk[2];
      if (pv != Shape{B_, Hkv_, Spast_, Dv_})
        info.fail(ErrorKind::kShape, "past_value " + shape_str(pv) + " does not match past_key " + shape_str(pk));
    }
    S_ = Spast_ + Skv_;
    has_nonpad_ = info.has_input(6);
    if (has_nonpad_) {
      if (has_past_) info.fail(ErrorKind::kModelFormat, "nonpad_kv_seqlen cannot be combined with past_key");
      if (shape_numel(info.input_shape(6)) != B_)
        info.fail(ErrorKind::kShape, "nonpad_kv_seqlen " + shape_str(info.input_shape(6)) + " must have " +
                                         std::to_string(B_) + " values");
    }
    has_mask_ = info.has_input(3);
    if (has_mask_) {
      Shape m = info.input_shape(3);
      mask_dt_ = info.input_dtype(3);
      if (m.empty() || m.size() > 4)
        info.fail(ErrorKind::kShape, "attn_mask " + shape_str(m) + " must have rank 1 to 4");
      // Right-aligned broadcast onto [B, Hq, Sq, S]; the key dim may be shorter than S (padded as masked).
      const int64_t full[4] = {B_, Hq_, Sq_, S_};
      const size_t off = 4 - m.size();
      int64_t stride = 1;
      for (int d = 3; d >= 0; --d) {
        mstride_[d] = 0;
        if (d < static_cast<int>(off)) continue;
        const int64_t md = m[d - off];
        if (d == 3) {
          if (md > S_ && md != 1)
            info.fail(ErrorKind::kShape, "attn_mask " + shape_str(m) + " has more keys than K (" +
                                             std::to_string(S_) + ")");
          mask_k_ = md;
        } else if (md != 1 && md != full[d]) {
          info.fail(ErrorKind::kShape, "attn_mask " + shape_str(m) + " does not broadcast to [" +
                                           std::to_string(B_) + ", " + std::to_string(Hq_) + ", " +
                                           std::to_string(Sq_) + ", " + std::to_string(S_) + "]");
        }
        if (md != 1) mstride_[d] = stride;
        stride *= md;
      }
      if (mask_k_ == 1 && S_ != 1) mask_k_ = S_;  // a broadcast key dim covers every key
    }
    scale_ = n.has_attr("scale") ? n.attr_float("scale", 1.f) : 1.f / std::sqrt(static_cast<float>(D_));
    softcap_ = n.attr_float("softcap", 0.f);
    causal_ = n.attr_int("is_causal", 0) != 0;
    mode_ = static_cast<int>(n.attr_int("qk_matmul_output_mode", 0));
    if (mode_ < 0 || mode_ > 3) info.fail(ErrorKind::kModelFormat, "qk_matmul_output_mode must be 0..3");
    if (info.opset() >= 25) {
      left_ = n.attr_int("left_window_size", -1);
      right_ = n.attr_int("right_window_size", -1);
      if (left_ < -1 || right_ < -1) info.fail(ErrorKind::kModelFormat, "window sizes must be -1 or >= 0");
    }
    // softmax_precision float/double: a 16-bit input's softmax runs unrounded.
    const int64_t sp = n.attr_int("softmax_precision", 0);
    wide_softmax_ = sp == 1 || sp == 11;
    out_pk_ = info.num_outputs() > 1 && info.has_output(1);
    out_pv_ = info.num_outputs() > 2 && info.has_output(2);
    out_qk_ = info.num_outputs() > 3 && info.has_output(3);
    // Where each operand's rows are: a view's strides, else packed heads
    // (3-D) or [B, H, S, D].
    const int64_t heads[3] = {Hq_, Hkv_, Hkv_}, lens[3] = {Sq_, Skv_, Skv_}, widths[3] = {D_, D_, Dv_};
    for (int i = 0; i < 3; ++i) {
      st_[i] = views.has[i] ? views.in[i].st : attn_strides(in3d_, heads[i], lens[i], widths[i]);
      off_[i] = views.has[i] ? views.in[i].offset : 0;
    }
    y_st_ = views.has_out ? views.out : attn_strides(in3d_, Hq_, Sq_, Dv_);
}

std::vector<int64_t> AttentionSpec::nonpad_lengths(const KernelContext& ctx) const {
  if (!has_nonpad_) return {};
  const TensorView& t = ctx.inputs[6];
  std::vector<int64_t> out(static_cast<size_t>(B_));
  for (int64_t b = 0; b < B_; ++b) {
    const int64_t v = t.dtype == DType::kInt32 ? t.as<int32_t>()[b] : t.as<int64_t>()[b];
    if (v < 0 || v > S_)
      throw Error(ErrorKind::kInvalidArgument, "nonpad_kv_seqlen[" + std::to_string(b) + "] = " + std::to_string(v) +
                                                   " is outside [0, " + std::to_string(S_) + "]");
    out[b] = v;
  }
  return out;
}

namespace {

class AttentionKernel final : public Kernel, private AttentionSpec {
 public:
  explicit AttentionKernel(const KernelBuildInfo& info) : AttentionSpec(info) {}

  const char* impl_name() const override { return "cpu loop"; }


  void run(KernelContext& ctx) const override {
    dispatch_any_float(ctx.inputs[0].dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      compute<T, compute_t<T>>(ctx);
    });
  }

 private:
  template <typename T, typename C>
  void compute(KernelContext& ctx) const {
    const T* Q = ctx.inputs[0].as<T>();
    const T* K = ctx.inputs[1].as<T>();
    const T* V = ctx.inputs[2].as<T>();
    const T* PK = has_past_ ? ctx.inputs[4].as<T>() : nullptr;
    const T* PV = has_past_ ? ctx.inputs[5].as<T>() : nullptr;
    T* Y = ctx.outputs[0].as<T>();
    T* OK = out_pk_ ? ctx.outputs[1].as<T>() : nullptr;
    T* OV = out_pv_ ? ctx.outputs[2].as<T>() : nullptr;
    T* QK = out_qk_ ? ctx.outputs[3].as<T>() : nullptr;
    const int64_t B = B_, Hq = Hq_, Hkv = Hkv_, Sq = Sq_, Skv = Skv_, Sp = Spast_, S = S_, D = D_, Dv = Dv_;

    const std::vector<int64_t> nonpad = nonpad_lengths(ctx);

    // Row addresses of operand `which` (0 q, 1 k, 2 v): st_ and off_.
    auto row = [&](const T* base, int which, int64_t b, int64_t h, int64_t j) {
      const AttnStrides& st = st_[which];
      return base + off_[which] + b * st.b + h * st.h + j * st.s;
    };
    // present = concat(past, new) along the sequence.
    auto write_present = [&](T* out, const T* past, const T* cur, int which, int64_t d) {
      parallel_for(B * Hkv, ctx.num_threads, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t bh = lo; bh < hi; ++bh) {
          const int64_t b = bh / Hkv, kh = bh % Hkv;
          T* o = out + bh * S * d;
          if (Sp) std::copy(past + bh * Sp * d, past + (bh + 1) * Sp * d, o);
          for (int64_t j = 0; j < Skv; ++j) std::copy_n(row(cur, which, b, kh, j), d, o + (Sp + j) * d);
        }
      });
    };
    if (OK) write_present(OK, PK, K, 1, D);
    if (OV) write_present(OV, PV, V, 2, Dv);
    auto key_row = [&](const T* past, const T* cur, const T* present, int which, int64_t b, int64_t kh, int64_t j,
                       int64_t d) -> const T* {
      if (present) return present + ((b * Hkv + kh) * S + j) * d;
      if (j < Sp) return past + ((b * Hkv + kh) * Sp + j) * d;
      return row(cur, which, b, kh, j - Sp);
    };

    const void* mask = has_mask_ ? ctx.inputs[3].data : nullptr;
    const C ninf = neg_inf<C>();
    // 16-bit types: round where the ONNX function body (computing in T) rounds,
    // so results match it to the last bit in most cases.
    constexpr bool kHalf = !std::is_same<T, C>::value;
    auto rt = [](C x) -> C {
      if constexpr (kHalf) return load(store<T>(x));
      else return x;
    };
    // Q and K are each scaled by sqrt(scale) (in T) before the product.
    const C sqrt_scale = rt(static_cast<C>(std::sqrt(static_cast<double>(scale_))));
    const C cap = static_cast<C>(softcap_);
    const int64_t group = Hq / Hkv;
    const int64_t rows = B * Hq * Sq;
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, S * (D + Dv)));

    parallel_for(rows, ctx.num_threads, grain, [&](int64_t lo, int64_t hi) {
      C* score = thread_buffer<C>(S, 0);
      C* bias = thread_buffer<C>(S, 1);
      C* acc = thread_buffer<C>(std::max<int64_t>(D, Dv), 2);
      C* qv = thread_buffer<C>(D, 3);
      for (int64_t r = lo; r < hi; ++r) {
        const int64_t i = r % Sq, h = (r / Sq) % Hq, b = r / (Sq * Hq);
        const int64_t kh = h / group;
        const T* qrow = row(Q, 0, b, h, i);
        for (int64_t d = 0; d < D; ++d) qv[d] = rt(load(qrow[d]) * sqrt_scale);

        // Additive bias and whether any key is attendable.
        const int64_t off = attn_query_offset(has_past_, Sp, has_nonpad_, has_nonpad_ ? nonpad[b] : 0, Sq);
        const int64_t valid = has_nonpad_ ? nonpad[b] : S;
        bool any = false;
        for (int64_t j = 0; j < S; ++j) {
          C bv = 0;
          if (mask) {
            if (j >= mask_k_) {
              bv = ninf;
            } else {
              const int64_t mi = b * mstride_[0] + h * mstride_[1] + i * mstride_[2] + j * mstride_[3];
              bv = mask_value<C>(mask, mi);
            }
          }
          if (attn_key_hidden(i, j, off, causal_, left_, right_, valid)) bv += ninf;  // attention_math.h
          bias[j] = bv;
          any |= !(bv == ninf);
        }

        for (int64_t j = 0; j < S; ++j) {
          const T* krow = key_row(PK, K, OK, 1, b, kh, j, D);
          C s = 0;
          if constexpr (kHalf) {
            for (int64_t d = 0; d < D; ++d) s += qv[d] * rt(load(krow[d]) * sqrt_scale);
          } else {
            for (int64_t d = 0; d < D; ++d) s += qv[d] * krow[d];
            s *= sqrt_scale;
          }
          s = rt(s);
          if (cap > 0) s = rt(cap * rt(std::tanh(rt(s / cap))));
          score[j] = s;
        }
        T* qk = QK ? QK + r * S : nullptr;
        if (qk && mode_ <= 1)
          for (int64_t j = 0; j < S; ++j) qk[j] = store<T>(score[j]);
        C m = ninf;
        for (int64_t j = 0; j < S; ++j) {
          score[j] = rt(score[j] + bias[j]);
          if (score[j] > m || std::isnan(score[j])) m = score[j];  // a NaN score makes the row NaN
        }
        if (qk && mode_ == 2)
          for (int64_t j = 0; j < S; ++j) qk[j] = store<T>(score[j]);
        if (!any || m == ninf) {
          std::fill(score, score + S, C(0));
        } else {
          C sum = 0;
          for (int64_t j = 0; j < S; ++j) {
            score[j] = std::exp(score[j] - m);
            if (!wide_softmax_) score[j] = rt(score[j]);
            sum += score[j];
          }
          if (!wide_softmax_) sum = rt(sum);
          for (int64_t j = 0; j < S; ++j) score[j] = rt(score[j] / sum);
        }
        if (qk && mode_ == 3)
          for (int64_t j = 0; j < S; ++j) qk[j] = store<T>(score[j]);

        std::fill(acc, acc + Dv, C(0));
        for (int64_t j = 0; j < S; ++j) {
          const C p = score[j];
          if (p == C(0)) continue;
          const T* vrow = key_row(PV, V, OV, 2, b, kh, j, Dv);
          for (int64_t d = 0; d < Dv; ++d) acc[d] += p * load(vrow[d]);
        }
        T* yrow = Y + b * y_st_.b + h * y_st_.h + i * y_st_.s;
        for (int64_t d = 0; d < Dv; ++d) yrow[d] = store<T>(acc[d]);
      }
    });
  }
};

bool supports(const KernelBuildInfo& info, std::string* why) {
  return float_inputs(info, {1, 2, 4, 5}, why);
}

TWINFER_REGISTER_KERNEL("Attention", Backend::kCPU, 0, supports, make_kernel<AttentionKernel>);
// The same op as graph/passes/fuse_attention.cc writes it into device plans.
TWINFER_REGISTER_KERNEL("Attention", Backend::kCPU, 0, supports, make_kernel<AttentionKernel>, kTwinferDomain);

}  // namespace

std::unique_ptr<Kernel> make_attention_loop(const KernelBuildInfo& info) {
  return std::make_unique<AttentionKernel>(info);
}

}  // namespace twinfer::tx
