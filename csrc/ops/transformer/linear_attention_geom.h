// LinearAttention's update rule and geometry, checked once when a kernel is
// built, shared by the CPU kernel (linear_attention.cc) and the CUDA kernel
// (backends/cuda/transformer_ops.cu). Q/K/V/decay/beta are packed [B, T, H*D];
// the state is [B, H_kv, d_k, d_v].
#pragma once
#include <cmath>
#include <string>

#include "ops/kernel.h"

namespace twinfer::tx {

struct LinAttnRule {
  bool gating = false, delta = false;
};

inline LinAttnRule parse_rule(const graph::Node& n) {
  const std::string r = n.attr_string("update_rule", "gated_delta");
  if (r == "linear") return {false, false};
  if (r == "gated") return {true, false};
  if (r == "delta") return {false, true};
  if (r == "gated_delta") return {true, true};
  throw Error(ErrorKind::kModelFormat,
              "update_rule '" + r + "' is not one of linear, gated, delta, gated_delta", n.name, n.op_type);
}

struct LinAttnGeom {
  LinAttnRule rule;
  int64_t Hq = 0, Hkv = 0, B = 0, T = 0, dk = 0, dv = 0, beta_last = 1;
  bool decay_per_dim = false;
  float scale = 1.f;
};

// Whether the node has the optional present_state output (output 1). Without
// it the state is only carried in scratch and dropped after the last token.
inline bool linattn_has_present(const KernelBuildInfo& info) { return info.num_outputs() > 1 && info.has_output(1); }

// The state's storage dtype: present_state's, else past_state's, else the
// query's (the state is always accumulated in float32).
inline DType linattn_state_dtype(const KernelBuildInfo& info) {
  return linattn_has_present(info) ? info.output(1).dtype
         : info.has_input(3)       ? info.input_dtype(3)
                                   : info.input_dtype(0);
}

inline LinAttnGeom linear_attention_geom(const KernelBuildInfo& info) {
  LinAttnGeom g;
  const graph::Node& n = info.node();
  g.rule = parse_rule(n);
  g.Hq = n.attr_int("q_num_heads", 0);
  g.Hkv = n.attr_int("kv_num_heads", 0);
  if (g.Hq <= 0 || g.Hkv <= 0 || g.Hq % g.Hkv)
    info.fail(ErrorKind::kModelFormat, "q_num_heads must be a positive multiple of kv_num_heads");
  Shape q = info.input_shape(0), k = info.input_shape(1), v = info.input_shape(2);
  if (q.size() != 3 || k.size() != 3 || v.size() != 3) info.fail(ErrorKind::kShape, "query, key, value must be 3-D");
  g.B = q[0];
  g.T = q[1];
  if (q[2] % g.Hq || k[2] % g.Hkv || v[2] % g.Hkv)
    info.fail(ErrorKind::kShape, "hidden sizes are not multiples of the head counts");
  g.dk = q[2] / g.Hq;
  g.dv = v[2] / g.Hkv;
  if (k != Shape{g.B, g.T, g.Hkv * g.dk} || v[0] != g.B || v[1] != g.T)
    info.fail(ErrorKind::kShape, "key " + shape_str(k) + " / value " + shape_str(v) + " do not match query " +
                                     shape_str(q));
  if (info.has_input(3) && info.input_shape(3) != Shape{g.B, g.Hkv, g.dk, g.dv})
    info.fail(ErrorKind::kShape, "past_state " + shape_str(info.input_shape(3)) + " must be " +
                                     shape_str(Shape{g.B, g.Hkv, g.dk, g.dv}));
  if (g.rule.gating != info.has_input(4) || g.rule.delta != info.has_input(5))
    info.fail(ErrorKind::kModelFormat, "decay / beta inputs do not match update_rule");
  if (g.rule.gating) {
    Shape d = info.input_shape(4);
    if (d.size() != 3 || d[0] != g.B || d[1] != g.T || (d[2] != g.Hkv && d[2] != g.Hkv * g.dk))
      info.fail(ErrorKind::kShape, "decay " + shape_str(d) + " must be [B, T, kv_num_heads] or [B, T, kv_num_heads*d_k]");
    g.decay_per_dim = d[2] == g.Hkv * g.dk && !(g.Hkv * g.dk == g.Hkv);
  }
  if (g.rule.delta) {
    Shape b = info.input_shape(5);
    if (b.size() != 3 || b[0] != g.B || b[1] != g.T || (b[2] != g.Hkv && b[2] != 1))
      info.fail(ErrorKind::kShape, "beta " + shape_str(b) + " must be [B, T, kv_num_heads] or [B, T, 1]");
    g.beta_last = b[2];
  }
  const float s = n.attr_float("scale", 0.f);
  g.scale = s == 0.f ? 1.f / std::sqrt(static_cast<float>(g.dk)) : s;
  return g;
}

}  // namespace twinfer::tx
