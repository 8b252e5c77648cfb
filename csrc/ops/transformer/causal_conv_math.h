// CausalConvWithState's geometry (checked once, when a kernel is built) and
// the value of one output position, shared by the CPU kernel
// (linear_attention.cc) and the CUDA kernel (backends/cuda/transformer_ops.cu),
// so the CPU tests cover the arithmetic the GPU runs (TWINFER_HD).
//
// A depthwise causal conv1d over [B, C, L] with weight [C, 1, k], optional
// bias [C], a carried state [B, C, k-1] (zeros when absent) and optional fused
// SiLU; present_state is the last k-1 positions of concat(past_state, input).
#pragma once
#include <string>

#include "ops/elementwise/scalar.h"
#include "ops/kernel.h"
#include "ops/transformer/tx_math.h"

namespace twinfer::tx {

struct CausalConvGeom {
  bool silu = false, has_bias = false, has_past = false, has_present = false;
  int64_t B = 0, C = 0, L = 0, K = 1;
};

inline bool causal_conv_parse_silu(const graph::Node& n) {
  const std::string a = n.attr_string("activation", "none");
  if (a == "none") return false;
  if (a == "silu" || a == "swish") return true;
  throw Error(ErrorKind::kModelFormat, "activation '" + a + "' is not one of none, silu, swish", n.name, n.op_type);
}

inline CausalConvGeom causal_conv_geom(const KernelBuildInfo& info) {
  CausalConvGeom g;
  g.silu = causal_conv_parse_silu(info.node());
  Shape x = info.input_shape(0), w = info.input_shape(1);
  if (x.size() != 3) info.fail(ErrorKind::kShape, "input must be [B, C, L], got " + shape_str(x));
  g.B = x[0];
  g.C = x[1];
  g.L = x[2];
  if (w.size() != 3 || w[0] != g.C || w[1] != 1 || w[2] < 1)
    info.fail(ErrorKind::kShape, "weight " + shape_str(w) + " must be [" + std::to_string(g.C) + ", 1, k]");
  g.K = w[2];
  g.has_bias = info.has_input(2);
  if (g.has_bias && info.input_shape(2) != Shape{g.C})
    info.fail(ErrorKind::kShape, "bias " + shape_str(info.input_shape(2)) + " must be [" + std::to_string(g.C) + "]");
  g.has_past = info.has_input(3);
  if (g.has_past && info.input_shape(3) != Shape{g.B, g.C, g.K - 1})
    info.fail(ErrorKind::kShape, "past_state " + shape_str(info.input_shape(3)) + " must be " +
                                     shape_str(Shape{g.B, g.C, g.K - 1}));
  g.has_present = info.num_outputs() > 1 && info.has_output(1);
  return g;
}

// padded[p] for p in [0, P + L) of one (batch, channel) lane: the carried
// state (xr's P = K-1 predecessors, zeros without one) then the input xr.
template <typename T, typename C = ew::compute_t<T>>
TWINFER_HD C causal_conv_padded(const T* xr, const T* pr, int64_t P, int64_t p) {
  if (p >= P) return ew::load(xr[p - P]);
  return pr ? C(ew::load(pr[p])) : C(0);
}

// Output l of one lane: bias + sum_i w[i] padded[l + i] in C, then (SiLU)
// the result rounded to T and v / (1 + exp(-v)) in C.
template <typename T, typename C = ew::compute_t<T>>
TWINFER_HD T causal_conv_at(const T* xr, const T* pr, const T* wr, const T* bias_c, int64_t K, bool silu,
                            int64_t l) {
  C acc = bias_c ? C(ew::load(*bias_c)) : C(0);
  for (int64_t i = 0; i < K; ++i) acc += mul_rn(C(ew::load(wr[i])), causal_conv_padded<T, C>(xr, pr, K - 1, l + i));
  if (silu) {
    const C v = ew::load(ew::store<T>(acc));
    acc = v / (C(1) + ew::m_exp(-v));
  }
  return ew::store<T>(acc);
}

}  // namespace twinfer::tx
