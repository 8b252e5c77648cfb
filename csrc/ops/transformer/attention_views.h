// Strided operands of com.twinfer::Attention.
//
// Exported attention reaches its [B, H, S, D] operands through copies: a
// packed QKV projection is split by Transpose + Gather, heads are split and
// moved by Reshape + Transpose, and the output goes back to [S*B, E] or
// [B, S, E] the same way. On a GPU each of those is a trip through memory
// as large as the activation. graph/passes/attention_views.cc instead
// hands the fused op the tensor the copies started from and says where each
// element is; these attributes carry that (com.twinfer domain only):
//
//   q_view, k_view, v_view  [offset, B, H, S, D, stride_b, stride_h, stride_s]
//       the operand as a [B, H, S, D] view of the input tensor, in elements
//       from its start, d contiguous (stride 1);
//   out_view                [stride_b, stride_h, stride_s]
//   out_shape               the output's shape
//       output 0 (of out_shape) holds [B, H, Sq, Dv] at these strides, d
//       contiguous, every element exactly once.
//
// A view is checked against its tensor's size where the kernels are built
// (a model may carry these attributes: nothing reads outside a tensor).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "ops/transformer/attention_math.h"

namespace twinfer {
class KernelBuildInfo;
}

namespace twinfer::tx {

struct AttnView {
  int64_t offset = 0;
  int64_t dims[4] = {0, 0, 0, 0};  // B, H, S, D
  AttnStrides st{0, 0, 0};         // over b, h, s; d is contiguous
};

struct AttnViews {
  bool has[3] = {false, false, false};  // q, k, v
  AttnView in[3];
  bool has_out = false;
  AttnStrides out{0, 0, 0};
  std::vector<int64_t> out_shape;
  bool any() const { return has[0] || has[1] || has[2] || has_out; }
};

// The attribute names, in operand order.
extern const char* const kAttnViewAttrs[3];

// Reads a node's view attributes (none outside the com.twinfer domain).
// Returns "" or what is malformed (a wrong length, a negative size or
// stride, out_view without out_shape or the other way round).
std::string read_attention_views(const graph::Node& n, AttnViews* out);

// The attention's sizes as the views give them (all three operand views
// must be present), checked against each other: "" or the message.
struct AttnDims {
  int64_t B = 0, Hq = 0, Hkv = 0, Sq = 0, Skv = 0, D = 0, Dv = 0;
};
std::string attention_view_dims(const AttnViews& v, AttnDims* d);

// Whether the views stay inside their tensors (numels of q, k, v) and the
// output view covers out_shape exactly once: "" or the message.
std::string attention_views_fit(const AttnViews& v, const AttnDims& d, const int64_t numel[3]);

// A kernel's check of a node with views (CPU and CUDA alike): the views
// consistent and inside their tensors, out_shape the output's, and none of
// the cache inputs, padding lengths or extra outputs. "" or the message.
std::string check_attention_views(const KernelBuildInfo& info, const AttnViews& v);

// "" when view `v` of operand `name` stays inside a tensor of `numel`
// elements, else the message.
std::string attention_view_fits(const AttnView& v, int64_t numel, const char* name);

// "" when [B, H, Sq, Dv] (dims) at strides `st` (d contiguous) covers a
// tensor of `numel` elements exactly once, else the message.
std::string attention_out_view_fits(const AttnStrides& st, const int64_t dims[4], int64_t numel);

}  // namespace twinfer::tx
