// The two GEMMs of float32 attention on the CPU, for the Attention kernel
// (ops/transformer/attention.cc): scores = scale * Q K^T into a buffer of
// [B, Hq, Sq, S] rows, then Y = P V from it, each one batched oneDNN matmul
// reading Q, K, V and writing Y at their strides (3-D packed heads, 4-D, or
// attention_views' slices). Grouped query heads are a batch dim of their
// own, [B, Hkv, G, ...], against K and V broadcast over it, so nothing is
// repeated. The kernel's row pass (mask, causal, window, padding, softcap,
// softmax) runs between the two. Before, every query row took dot products
// one key at a time: 10-19x onnxruntime's time on prefill shapes.
#pragma once
#include <memory>
#include <string>

#include "ops/kernel.h"
#include "ops/transformer/attention_math.h"

namespace twinfer::cpu::onednn {

struct AttentionGemmGeom {
  int64_t B = 0, Hq = 0, Hkv = 0, Sq = 0, S = 0, D = 0, Dv = 0;
  tx::AttnStrides q{}, k{}, v{}, y{};  // over (b, h, s); the last dim contiguous
  float scale = 1.f;
};

class AttentionGemms {
 public:
  // Throws where oneDNN builds no primitive; impl_info() says which it chose.
  AttentionGemms(const AttentionGemmGeom& g, const std::string& node);
  ~AttentionGemms();
  // Scratch the two matmuls need (oneDNN's), before the caller's own.
  size_t scratch_bytes() const;
  // Whether both run on a JIT kernel (a reference one would be slower than
  // the kernel's own loop).
  bool fast() const;
  // scores [B, Hq, Sq, S], contiguous = scale * q k^T (q, k at their strides).
  void scores(const KernelContext& ctx, const float* q, const float* k, float* scores) const;
  // y (at its strides) = p v, p the [B, Hq, Sq, S] probabilities.
  void values(const KernelContext& ctx, const float* p, const float* v, float* y) const;

 private:
  struct Cores;
  std::unique_ptr<Cores> cores_;
};

}  // namespace twinfer::cpu::onednn
