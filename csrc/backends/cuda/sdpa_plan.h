// Fused attention by cuDNN (its flash-attention graph, built through the
// frontend in cudnn_fe_sdpa.cc) behind an interface free of the frontend's
// headers, so attention.cu can try it first and keep its own kernel for
// what cuDNN does not take. Without the frontend in the build,
// no_cudnn_fe.cc answers every request with null and the reason.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/dtype.h"
#include "core/shape.h"
#include "ops/transformer/attention_math.h"

namespace twinfer::cuda {

// [B, H, Sq, D] query, [B, Hkv, Sk, D] key and [B, Hkv, Sk, Dv] value, output
// [B, H, Sq, Dv] (grouped query heads where Hkv < H: query head h reads key
// head h / (H / Hkv), cuDNN's GQA / MQA, no repeated copy): contiguous, or at the strides set_strides gives (d
// contiguous; a packed QKV projection's slices, heads read in place).
struct SdpaSpec {
  int64_t B = 0, H = 0, Sq = 0, Sk = 0, D = 0, Dv = 0;
  int64_t Hkv = 0;  // key / value heads; 0: H
  int64_t kv_heads() const { return Hkv > 0 ? Hkv : H; }
  // Strides over [b, h, s, d] of q, k, v and o; all zero: contiguous.
  int64_t strides[4][4] = {};
  DType dtype = DType::kFloat16;  // float16 or bfloat16: cuDNN's kernel takes no other
  float scale = 1.f;
  bool causal = false;  // upper-left: query i sees keys 0..i
  // An additive mask of `dtype` over [b, h, i, j]: dims and strides
  // (set_broadcast_bias: [B, 1 or H, Sq, Sk] with stride 0 where the mask
  // broadcasts over batches or queries, the form PyTorch hands cuDNN: its
  // attn_bias.expand(B, bias.size(1), Sq, Sk); the head dim stays 1 where the
  // mask has one head, cuDNN's documented broadcast, not a stride 0).
  bool has_bias = false;
  int64_t bias_dims[4] = {1, 1, 1, 1};
  int64_t bias_strides[4] = {0, 0, 0, 0};

  void set_strides(tx::AttnStrides q, tx::AttnStrides k, tx::AttnStrides v, tx::AttnStrides o) {
    const tx::AttnStrides all[4] = {q, k, v, o};
    for (int t = 0; t < 4; ++t) {
      strides[t][0] = all[t].b, strides[t][1] = all[t].h, strides[t][2] = all[t].s, strides[t][3] = 1;
    }
  }
  // Operand t's (0 q, 1 k, 2 v, 3 o) strides over its dims, contiguous unless set.
  Shape strides_of(int t, const Shape& dims) const {
    if (strides[t][3] == 0) return contiguous_strides(dims);
    return {strides[t][0], strides[t][1], strides[t][2], strides[t][3]};
  }

  // The mask of dims m (rank 4, 1 where it broadcasts; contiguous) as the bias.
  void set_broadcast_bias(const int64_t m[4]) {
    const int64_t full[4] = {B, H, Sq, Sk};
    int64_t run = 1;
    for (int d = 3; d >= 0; --d) {
      const bool one_head = d == 1 && m[d] == 1;
      bias_dims[d] = one_head ? 1 : full[d];
      bias_strides[d] = m[d] == 1 && !one_head ? 0 : run;
      run *= m[d];
    }
    has_bias = true;
  }
};

class SdpaPlan {
 public:
  virtual ~SdpaPlan() = default;
  virtual size_t workspace_bytes() const = 0;
  virtual const std::string& plan_name() const = 0;  // cuDNN's engine and knobs
  // Enqueues on `s`; bias is null without one.
  virtual void run(const void* q, const void* k, const void* v, const void* bias, void* o, void* workspace,
                   cudaStream_t s) const = 0;
};

// cuDNN's plan for `spec` on the current device, or null with `why` (no
// frontend in this build, no cuDNN, a shape or option cuDNN refuses).
// Kernels of the same spec share one plan (runs are serialized anyway).
std::shared_ptr<const SdpaPlan> make_cudnn_sdpa(const SdpaSpec& spec, std::string* why);

// The frontend's own checks of `spec` for a GPU of `sm_version` (90: H100),
// run without a GPU: "" when it passes, else the message. The cuDNN engine's
// support is only known on the device; this catches what the graph itself
// gets wrong (dims, strides, options), and exercises the frontend's loading
// of cuDNN, in CI.
std::string validate_cudnn_sdpa(const SdpaSpec& spec, int sm_version);

}  // namespace twinfer::cuda
