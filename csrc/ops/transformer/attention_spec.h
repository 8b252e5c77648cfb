// The CPU Attention kernels' view of an Attention node (opset 23 / 24 / 25
// and com.twinfer::Attention): sizes, strides, masks and options, checked
// once when a kernel is built (a node that does not fit fails there with the
// reason). Two kernels share it: the row loop (attention.cc: any float type,
// every output) and the float32 GEMM form (backends/cpu/onednn_attention.cc),
// which falls back to the loop where it does not apply.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/half.h"
#include "ops/kernel.h"
#include "ops/transformer/attention_math.h"
#include "ops/transformer/tx_common.h"

namespace twinfer::tx {

struct AttentionSpec {
  explicit AttentionSpec(const KernelBuildInfo& info);

  // nonpad_kv_seqlen's values (empty without it), each checked to lie in [0, S].
  std::vector<int64_t> nonpad_lengths(const KernelContext& ctx) const;

  template <typename C>
  C mask_value(const void* mask, int64_t i) const {
    switch (mask_dt_) {
      case DType::kBool: return static_cast<const bool*>(mask)[i] ? C(0) : neg_inf<C>();
      case DType::kFloat32: return static_cast<C>(static_cast<const float*>(mask)[i]);
      case DType::kFloat64: return static_cast<C>(static_cast<const double*>(mask)[i]);
      case DType::kFloat16: return static_cast<C>(load(static_cast<const half_t*>(mask)[i]));
      case DType::kBFloat16: return static_cast<C>(load(static_cast<const bfloat16_t*>(mask)[i]));
      default: return C(0);
    }
  }

  // q, k, v as 3-D packed heads or 4-D; past / present (in-op cache); the
  // extra outputs; masks right-aligned onto [B, Hq, Sq, S].
  bool in3d_ = false, has_past_ = false, has_nonpad_ = false, has_mask_ = false, causal_ = false;
  bool wide_softmax_ = false, out_pk_ = false, out_pv_ = false, out_qk_ = false;
  int64_t B_ = 0, Hq_ = 0, Hkv_ = 0, Sq_ = 0, Skv_ = 0, Spast_ = 0, S_ = 0, D_ = 0, Dv_ = 0;
  int64_t mstride_[4] = {0, 0, 0, 0};
  AttnStrides st_[3] = {}, y_st_ = {};  // q, k, v rows and the output's
  int64_t off_[3] = {0, 0, 0};
  int64_t mask_k_ = 0;
  DType mask_dt_ = DType::kUndefined;
  float scale_ = 1.f, softcap_ = 0.f;
  int mode_ = 0;
  int64_t left_ = -1, right_ = -1;
};

// The row loop kernel for `info` (the fallback of the GEMM form).
std::unique_ptr<Kernel> make_attention_loop(const KernelBuildInfo& info);

}  // namespace twinfer::tx
