// RotaryEmbedding's geometry (checked once, when a kernel is built) and the
// rotation of one (x1, x2) pair, shared by the CPU kernel (rotary.cc) and the
// CUDA kernel (backends/cuda/transformer_ops.cu), so the CPU tests cover the
// arithmetic the GPU runs. The pair math compiles under nvcc (TWINFER_HD).
#pragma once
#include <algorithm>
#include <string>
#include <type_traits>

#include "ops/elementwise/scalar.h"
#include "ops/kernel.h"
#include "ops/transformer/tx_math.h"

namespace twinfer::tx {

struct RotaryGeom {
  bool in3d = false, interleaved = false, has_pos = false;
  int64_t B = 0, H = 0, S = 0, D = 0, rot = 0, max_pos = 0, cache_batch_stride = 0;

  // Row r enumerates (b, s, h); its first element in X / Y.
  TWINFER_HD int64_t row_offset(int64_t r) const {
    const int64_t h = r % H, s = (r / H) % S, b = r / (H * S);
    return in3d ? ((b * S + s) * H + h) * D : ((b * H + h) * S + s) * D;
  }
  // Pair i of a row: the indices of x1 and x2.
  TWINFER_HD int64_t first(int64_t i) const { return interleaved ? 2 * i : i; }
  TWINFER_HD int64_t second(int64_t i) const { return interleaved ? 2 * i + 1 : i + rot / 2; }
};

// A product rounded to T for 16-bit T (the CPU kernel's order), else as is.
template <typename T, typename C>
TWINFER_HD C rotary_round(C v) {
  if constexpr (std::is_same<T, C>::value) return v;
  else return ew::load(ew::store<T>(v));
}

// real = cos x1 - sin x2, imag = sin x1 + cos x2, each product rounded to T
// before the add for 16-bit T.
template <typename T, typename C>
TWINFER_HD void rotary_pair(C c, C sn, C x1, C x2, T& y1, T& y2) {
  y1 = ew::store<T>(rotary_round<T>(mul_rn(c, x1)) - rotary_round<T>(mul_rn(sn, x2)));
  y2 = ew::store<T>(rotary_round<T>(mul_rn(sn, x1)) + rotary_round<T>(mul_rn(c, x2)));
}

// X is [B, H, S, D] or [B, S, H*D] (num_heads given). With position_ids [B, S]
// the caches are [max_pos, rot/2]; without, [B, S, rot/2] or [S, rot/2].
inline RotaryGeom rotary_geom(const KernelBuildInfo& info) {
  RotaryGeom g;
  const graph::Node& n = info.node();
  Shape x = info.input_shape(0);
  if (x.size() != 3 && x.size() != 4) info.fail(ErrorKind::kShape, "input must be 3-D or 4-D, got " + shape_str(x));
  g.in3d = x.size() == 3;
  g.B = x[0];
  if (g.in3d) {
    g.H = n.attr_int("num_heads", 0);
    if (g.H <= 0) info.fail(ErrorKind::kModelFormat, "3-D input needs num_heads > 0");
    g.S = x[1];
    if (x[2] % g.H)
      info.fail(ErrorKind::kShape, "hidden size " + std::to_string(x[2]) + " is not a multiple of num_heads " +
                                       std::to_string(g.H));
    g.D = x[2] / g.H;
  } else {
    g.H = x[1];
    g.S = x[2];
    g.D = x[3];
  }
  g.rot = n.attr_int("rotary_embedding_dim", 0);
  if (g.rot == 0) g.rot = g.D;
  if (g.rot < 0 || g.rot > g.D || g.rot % 2)
    info.fail(ErrorKind::kModelFormat, "rotary_embedding_dim " + std::to_string(g.rot) +
                                           " must be even and at most the head size " + std::to_string(g.D));
  g.interleaved = n.attr_int("interleaved", 0) != 0;
  const int64_t half = g.rot / 2;
  Shape cs = info.input_shape(1);
  if (info.input_shape(2) != cs)
    info.fail(ErrorKind::kShape, "cos_cache " + shape_str(cs) + " and sin_cache " + shape_str(info.input_shape(2)) +
                                     " differ");
  if (cs.empty() || cs.back() != half)
    info.fail(ErrorKind::kShape, "the caches' last dim must be rotary_embedding_dim / 2 = " + std::to_string(half) +
                                     ", got " + shape_str(cs));
  g.has_pos = info.has_input(3);
  if (g.has_pos) {
    if (cs.size() != 2) info.fail(ErrorKind::kShape, "with position_ids the caches must be 2-D, got " + shape_str(cs));
    g.max_pos = cs[0];
    Shape ps = info.input_shape(3);
    if (ps != Shape{g.B, g.S})
      info.fail(ErrorKind::kShape, "position_ids " + shape_str(ps) + " must be [" + std::to_string(g.B) + ", " +
                                       std::to_string(g.S) + "]");
  } else {
    const int64_t n_rows = shape_numel(cs) / std::max<int64_t>(1, half);
    if (n_rows == g.B * g.S && (cs.size() == 3 ? cs[0] == g.B && cs[1] == g.S : true)) {
      g.cache_batch_stride = g.S;
    } else if (n_rows == g.S && (cs.size() == 2 || (cs.size() == 3 && cs[0] == 1))) {
      g.cache_batch_stride = 0;
    } else {
      info.fail(ErrorKind::kShape, "without position_ids the caches must be [" + std::to_string(g.B) + ", " +
                                       std::to_string(g.S) + ", " + std::to_string(half) + "], got " + shape_str(cs));
    }
  }
  return g;
}

}  // namespace twinfer::tx
