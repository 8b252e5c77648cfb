#include "backends/cpu/attention_gemms.h"

#include <algorithm>

#include "backends/cpu/onednn_matmul.h"

namespace twinfer::cpu::onednn {

struct AttentionGemms::Cores {
  MatmulCore qk, pv;
};

namespace {

// Operand strides over [B, Hkv, G, rows, cols] for a [b, h, s] strided tensor
// whose heads are query heads (G of them per key head, contiguous in h).
dnnl::memory::dims grouped(const tx::AttnStrides& st, int64_t G) { return {st.b, G * st.h, st.h, st.s, 1}; }

MatmulDesc qk_desc(const AttentionGemmGeom& g) {
  const int64_t G = g.Hq / g.Hkv;
  MatmulDesc d;
  d.a = {g.B, g.Hkv, G, g.Sq, g.D};
  d.a_strides = grouped(g.q, G);
  // K^T: [B, Hkv, 1, D, S], the key rows read as columns.
  d.b = {g.B, g.Hkv, 1, g.D, g.S};
  d.b_strides = {g.k.b, g.k.h, g.Hkv * g.k.h, 1, g.k.s};
  d.y = {g.B, g.Hkv, G, g.Sq, g.S};  // [B, Hq, Sq, S] contiguous
  d.alpha = g.scale;
  return d;
}

MatmulDesc pv_desc(const AttentionGemmGeom& g) {
  const int64_t G = g.Hq / g.Hkv;
  MatmulDesc d;
  d.a = {g.B, g.Hkv, G, g.Sq, g.S};
  d.b = {g.B, g.Hkv, 1, g.S, g.Dv};
  d.b_strides = {g.v.b, g.v.h, g.Hkv * g.v.h, g.v.s, 1};
  d.y = {g.B, g.Hkv, G, g.Sq, g.Dv};
  d.y_strides = grouped(g.y, G);
  return d;
}

}  // namespace

AttentionGemms::AttentionGemms(const AttentionGemmGeom& g, const std::string& node)
    : cores_(new Cores{MatmulCore(qk_desc(g), node, "Attention"), MatmulCore(pv_desc(g), node, "Attention")}) {}

AttentionGemms::~AttentionGemms() = default;

size_t AttentionGemms::scratch_bytes() const {
  return std::max(cores_->qk.scratch_bytes(), cores_->pv.scratch_bytes());
}

bool AttentionGemms::fast() const {
  auto jit = [](const std::string& impl) { return impl.find("ref") == std::string::npos; };
  return jit(cores_->qk.impl_info()) && jit(cores_->pv.impl_info());
}

void AttentionGemms::scores(const KernelContext& ctx, const float* q, const float* k, float* scores) const {
  cores_->qk.run(ctx, q, k, nullptr, nullptr, scores);
}

void AttentionGemms::values(const KernelContext& ctx, const float* p, const float* v, float* y) const {
  cores_->pv.run(ctx, p, v, nullptr, nullptr, y);
}

}  // namespace twinfer::cpu::onednn
