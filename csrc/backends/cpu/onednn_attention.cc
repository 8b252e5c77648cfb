// Attention on float32 (opset 23+ and com.twinfer::Attention, CPU plans) as
// two batched oneDNN GEMMs around a row pass (attention_gemms.h): the scores
// of every query row into scratch, then per row the softcap, the additive
// bias (mask, causal, sliding window, padding lengths), the softmax
// (ops/nn/softmax_rows.h), then P V written at the output's strides. A KV
// cache inside the op is written out first (present, or scratch) and read as
// K and V. The row loop (ops/transformer/attention.cc) takes what this does
// not: other float types, the qk_matmul_output debug output, strides oneDNN
// only has a reference kernel for. Long sequences go through in blocks of
// query rows (kScoreBlockBytes of scores at a time).
#include <algorithm>
#include <cmath>

#include "backends/cpu/attention_gemms.h"
#include "core/parallel.h"
#include "graph/domains.h"
#include "ops/nn/softmax_rows.h"
#include "ops/transformer/attention_spec.h"

namespace twinfer::cpu::onednn {

namespace {

// Scores held at once: above this, query rows go through in blocks (a long
// prompt's [B, Hq, Sq, S] scores would take gigabytes), each block's GEMMs
// and rows before the next.
constexpr int64_t kScoreBlockBytes = int64_t{64} << 20;

int64_t aligned(int64_t bytes) { return (bytes + 63) / 64 * 64; }

class OnednnAttention final : public Kernel, private tx::AttentionSpec {
 public:
  explicit OnednnAttention(const KernelBuildInfo& info) : AttentionSpec(info), node_(info.node().name) {
    if (B_ * Hq_ * Sq_ * S_ * D_ * Dv_ == 0) {
      loop_ = tx::make_attention_loop(info);
      return;
    }
    const int64_t row_bytes = B_ * Hq_ * S_ * int64_t{sizeof(float)};  // one query row of every head
    block_ = std::clamp<int64_t>(kScoreBlockBytes / row_bytes, 1, Sq_);
    try {
      gemms_ = gemms_for(block_);
      if (Sq_ % block_) tail_ = gemms_for(Sq_ % block_);
    } catch (const Error&) {  // strides oneDNN builds no matmul for: the loop takes them
      gemms_.reset();
    }
    if (!gemms_ || !gemms_->fast() || (tail_ && !tail_->fast())) {  // a reference GEMM is slower than the loop
      gemms_.reset();
      tail_.reset();
      loop_ = tx::make_attention_loop(info);
      return;
    }
    size_t gemm_scratch = gemms_->scratch_bytes();
    if (tail_) gemm_scratch = std::max(gemm_scratch, tail_->scratch_bytes());
    scores_at_ = aligned(static_cast<int64_t>(gemm_scratch));
    int64_t end = scores_at_ + aligned(block_ * row_bytes);
    if (has_past_ && !out_pk_) {
      pk_at_ = end;
      end += aligned(B_ * Hkv_ * S_ * D_ * int64_t{sizeof(float)});
    }
    if (has_past_ && !out_pv_) {
      pv_at_ = end;
      end += aligned(B_ * Hkv_ * S_ * Dv_ * int64_t{sizeof(float)});
    }
    scratch_ = static_cast<size_t>(end);
  }

  size_t scratch_bytes() const override { return loop_ ? loop_->scratch_bytes() : scratch_; }
  const char* impl_name() const override { return loop_ ? loop_->impl_name() : "onednn gemms + softmax rows"; }

  void run(KernelContext& ctx) const override {
    if (loop_) return loop_->run(ctx);
    char* scratch = static_cast<char*>(ctx.scratch);
    float* scores = reinterpret_cast<float*>(scratch + scores_at_);
    const float* q = ctx.inputs[0].as<const float>() + off_[0];
    const float* k = ctx.inputs[1].as<const float>() + off_[1];
    const float* v = ctx.inputs[2].as<const float>() + off_[2];
    // present = concat(past, new): asked for as an output (with or without a
    // past), or in scratch where a past must be joined to be read.
    const float* past_k = has_past_ ? ctx.inputs[4].as<const float>() : nullptr;
    const float* past_v = has_past_ ? ctx.inputs[5].as<const float>() : nullptr;
    if (has_past_ || out_pk_) {
      float* pk = out_pk_ ? ctx.outputs[1].as<float>() : reinterpret_cast<float*>(scratch + pk_at_);
      write_present(ctx, pk, past_k, k, st_[1], D_);
      if (has_past_) k = pk;
    }
    if (has_past_ || out_pv_) {
      float* pv = out_pv_ ? ctx.outputs[2].as<float>() : reinterpret_cast<float*>(scratch + pv_at_);
      write_present(ctx, pv, past_v, v, st_[2], Dv_);
      if (has_past_) v = pv;
    }
    const std::vector<int64_t> nonpad = nonpad_lengths(ctx);
    const void* mask = has_mask_ ? ctx.inputs[3].data : nullptr;
    float* y = ctx.outputs[0].as<float>();
    const int64_t S = S_;
    for (int64_t i0 = 0; i0 < Sq_; i0 += block_) {
      const int64_t n = std::min(block_, Sq_ - i0);
      const AttentionGemms& g = n == block_ ? *gemms_ : *tail_;
      // The block's scores are [B, Hq, n, S]: row r is query i0 + r % n of head (r / n) % Hq.
      g.scores(ctx, q + i0 * st_[0].s, k, scores);
      parallel_for(B_ * Hq_ * n, ctx.num_threads, std::max<int64_t>(1, 16384 / S), [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r)
          row(scores + r * S, r / (n * Hq_), (r / n) % Hq_, i0 + r % n, mask, nonpad);
      });
      g.values(ctx, scores, v, y + i0 * y_st_.s);
    }
  }

 private:
  // One row of scores -> its probabilities: softcap, bias, softmax; zeros
  // where no key is attendable (the opset 23 errata), NaN where a score is.
  // A key the mask hides weighs 0, and 0 times an inf or NaN in V is NaN,
  // as onnxruntime and ONNX's reference (a MatMul of P and V) give it; the
  // row loop (attention.cc) skips such keys instead.
  void row(float* s, int64_t b, int64_t h, int64_t i, const void* mask, const std::vector<int64_t>& nonpad) const {
    const int64_t S = S_;
    const float ninf = -INFINITY;
    if (softcap_ > 0.f)
      for (int64_t j = 0; j < S; ++j) s[j] = softcap_ * std::tanh(s[j] / softcap_);
    const int64_t off = tx::attn_query_offset(has_past_, Spast_, has_nonpad_, has_nonpad_ ? nonpad[b] : 0, Sq_);
    const int64_t valid = has_nonpad_ ? nonpad[b] : S;
    const bool hides = causal_ || left_ >= 0 || right_ >= 0 || has_nonpad_;
    if (mask || hides) {
      // With keys hidden: a row left with none (every score -inf, no NaN)
      // is zeros, as the row loop has it; the scan rides on the bias pass.
      bool any = false, nan = false;
      float m = ninf;
      for (int64_t j = 0; j < S; ++j) {
        float bv = 0.f;
        if (mask) {
          bv = j >= mask_k_ ? ninf
                            : mask_value<float>(mask, b * mstride_[0] + h * mstride_[1] + i * mstride_[2] +
                                                          j * mstride_[3]);
        }
        if (hides && tx::attn_key_hidden(i, j, off, causal_, left_, right_, valid)) bv += ninf;
        any |= bv != ninf;
        const float v = s[j] += bv;
        nan |= v != v;
        m = v > m ? v : m;
      }
      if (!any || (m == ninf && !nan)) {
        std::fill(s, s + S, 0.f);
        return;
      }
    }
    nn::softmax_row(s, nullptr, 0, 1.f, s, S);
  }

  // present = concat(past, new) along the sequence, [B, Hkv, S, d].
  void write_present(const KernelContext& ctx, float* out, const float* past, const float* cur,
                     const tx::AttnStrides& st, int64_t d) const {
    const int64_t Sp = Spast_, Skv = Skv_, S = S_;
    parallel_for(B_ * Hkv_, ctx.num_threads, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t bh = lo; bh < hi; ++bh) {
        const int64_t b = bh / Hkv_, kh = bh % Hkv_;
        float* o = out + bh * S * d;
        if (Sp) std::copy(past + bh * Sp * d, past + (bh + 1) * Sp * d, o);
        for (int64_t j = 0; j < Skv; ++j) std::copy_n(cur + b * st.b + kh * st.h + j * st.s, d, o + (Sp + j) * d);
      }
    });
  }

  // The two GEMMs for `rows` query rows of every head.
  std::unique_ptr<AttentionGemms> gemms_for(int64_t rows) const {
    AttentionGemmGeom g;
    g.B = B_, g.Hq = Hq_, g.Hkv = Hkv_, g.Sq = rows, g.S = S_, g.D = D_, g.Dv = Dv_;
    g.q = st_[0], g.y = y_st_, g.scale = scale_;
    // With a cache, K and V are the present tensors ([B, Hkv, S, d]).
    g.k = has_past_ ? tx::attn_strides(false, Hkv_, S_, D_) : st_[1];
    g.v = has_past_ ? tx::attn_strides(false, Hkv_, S_, Dv_) : st_[2];
    return std::make_unique<AttentionGemms>(g, node_);
  }

  std::string node_;
  std::unique_ptr<Kernel> loop_;  // where the GEMM form does not apply
  std::unique_ptr<AttentionGemms> gemms_, tail_;  // a block of block_ query rows; the last, shorter one
  int64_t block_ = 0, scores_at_ = 0, pk_at_ = 0, pv_at_ = 0;
  size_t scratch_ = 0;
};

bool supports(const KernelBuildInfo& info, std::string* why) {
  for (size_t i : {0, 1, 2, 4, 5}) {
    if (i < info.node().inputs.size() && info.has_input(i) && info.input_dtype(i) != DType::kFloat32) {
      if (why) *why = "Attention as GEMMs: float32 only";
      return false;
    }
  }
  if (info.num_outputs() > 3 && info.has_output(3)) {
    if (why) *why = "Attention as GEMMs: the qk_matmul_output debug output runs in the loop";
    return false;
  }
  return true;
}

TWINFER_REGISTER_KERNEL("Attention", Backend::kCPU, 10, supports, make_kernel<OnednnAttention>);
TWINFER_REGISTER_KERNEL("Attention", Backend::kCPU, 10, supports, make_kernel<OnednnAttention>, kTwinferDomain);

}  // namespace
}  // namespace twinfer::cpu::onednn
