// Numpy broadcasting for up to three inputs, planned once per kernel.
//
// The plan drops size-1 output dims and merges neighbouring dims that every
// input walks contiguously (or not at all), so the common cases collapse to
// a 1-D or 2-D loop: same shapes -> one flat run; [N,C,H,W] + [C,1,1] ->
// rows of H*W against one bias value; [B,S,H] + [H] -> rows of H against the
// same H-vector. The innermost dim then has, per input, a stride of 1
// (contiguous) or 0 (one value repeated), which the kernels specialise so
// the compiler vectorises them; outer dims advance by an odometer.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "core/parallel.h"
#include "core/shape.h"

namespace twinfer::ew {

constexpr int kMaxBroadcastInputs = 3;

struct BroadcastPlan {
  int num_inputs = 0;
  int64_t total = 0;   // output elements
  int64_t inner = 1;   // length of the innermost (collapsed) output dim
  std::array<int64_t, kMaxBroadcastInputs> inner_stride{};  // 0 or 1 per input
  std::vector<int64_t> outer;                                // outer dims, outermost first
  std::vector<std::array<int64_t, kMaxBroadcastInputs>> outer_stride;  // per dim, per input
};

// Plans `inputs` (1..3 shapes) broadcast to `out`. Throws kShape when an
// input does not broadcast to `out`.
BroadcastPlan make_broadcast_plan(const std::vector<Shape>& inputs, const Shape& out);

// Walks the output in parallel; for each contiguous output run calls
// fn(out_offset, in_offsets, len): output elements [out_offset, out_offset+len)
// read input k from in_offsets[k] on, stepping by plan.inner_stride[k].
template <typename Fn>
void broadcast_for_each(const BroadcastPlan& p, int threads, int64_t grain, Fn&& fn) {
  const int rank = static_cast<int>(p.outer.size());
  const int nin = p.num_inputs;
  parallel_for(p.total, threads, grain, [&](int64_t begin, int64_t end) {
    // Start position: row index -> odometer over the outer dims.
    int64_t row = begin / p.inner, col = begin % p.inner;
    std::vector<int64_t> idx(rank, 0);
    std::array<int64_t, kMaxBroadcastInputs> base{};
    for (int d = rank - 1; d >= 0; --d) {
      idx[d] = row % p.outer[d];
      row /= p.outer[d];
      for (int k = 0; k < nin; ++k) base[k] += idx[d] * p.outer_stride[d][k];
    }
    while (begin < end) {
      int64_t len = std::min(p.inner - col, end - begin);
      std::array<int64_t, kMaxBroadcastInputs> off{};
      for (int k = 0; k < nin; ++k) off[k] = base[k] + col * p.inner_stride[k];
      fn(begin, off, len);
      begin += len;
      col = 0;
      if (begin >= end) break;
      for (int d = rank - 1; d >= 0; --d) {  // next row
        for (int k = 0; k < nin; ++k) base[k] += p.outer_stride[d][k];
        if (++idx[d] < p.outer[d]) break;
        for (int k = 0; k < nin; ++k) base[k] -= p.outer_stride[d][k] * p.outer[d];
        idx[d] = 0;
      }
    }
  });
}

// out[i] = f(a[.], b[.]) over a plan of two inputs. A and B are storage
// types; f maps them to Out (see Lift in elementwise_kernels.h).
template <typename A, typename B, typename Out, typename F>
void broadcast_apply2(const BroadcastPlan& p, const A* a, const B* b, Out* out, const F& f,
                      int threads, int64_t grain) {
  const bool sa = p.inner_stride[0] != 0, sb = p.inner_stride[1] != 0;
  broadcast_for_each(p, threads, grain, [&](int64_t o, const std::array<int64_t, 3>& off, int64_t n) {
    const A* pa = a + off[0];
    const B* pb = b + off[1];
    Out* po = out + o;
    // Four loops so each is a plain, vectorisable one.
    if (sa && sb) {
      for (int64_t j = 0; j < n; ++j) po[j] = f(pa[j], pb[j]);
    } else if (sa) {
      const B vb = *pb;
      for (int64_t j = 0; j < n; ++j) po[j] = f(pa[j], vb);
    } else if (sb) {
      const A va = *pa;
      for (int64_t j = 0; j < n; ++j) po[j] = f(va, pb[j]);
    } else {
      const Out v = f(*pa, *pb);
      for (int64_t j = 0; j < n; ++j) po[j] = v;
    }
  });
}

}  // namespace twinfer::ew
