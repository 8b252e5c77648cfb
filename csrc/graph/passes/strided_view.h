// A value that copies only move elements (Reshape, Transpose, Gather of one
// index...) as a strided view of the value those copies started from.
//
// Exporters reach attention's operands through such chains: a packed QKV
// projection [S, B, 3E] becomes q [B, H, S, D] by Reshape, Unsqueeze,
// Transpose, Squeeze, Gather, Reshape, Transpose, Reshape. Some values in
// between are no strided view of the start ([S, B*H, D] of a packed
// projection is not), yet the end often is. So the walk keeps, for each dim,
// the (size, stride) pieces it is made of (outer to inner), splitting and
// regrouping them as reshapes do, and only asks at the end whether every dim
// is one piece. The idea is the "layout" of CUTLASS's CuTe, written here for
// this one use.
//
// The pieces of the values between are never materialised: a view only
// names the start, an offset and strides, so a kernel that takes strides can
// read (or write) the end value where the start value is.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "core/shape.h"
#include "graph/ir.h"

namespace twinfer::passes {

// Each dim as (size, stride) pieces, outer to inner; a dim of size 1 has
// none. Elements from `offset`.
struct Layout {
  std::vector<std::vector<std::pair<int64_t, int64_t>>> dims;
  int64_t offset = 0;
};

// Nodes that keep the elements in row-major order (Reshape, Flatten,
// Squeeze, Unsqueeze, Identity), and a Transpose perm's validity.
bool is_reshape_like(const graph::Node& n);
bool valid_perm(const std::vector<int64_t>& perm, size_t rank);

Layout contiguous_layout(const Shape& shape);
// The same elements in row-major order as `to` (Reshape, Flatten, Squeeze,
// Unsqueeze): false when `to` cuts a piece where it cannot be split.
bool reshape_layout(Layout& l, const Shape& to);
void transpose_layout(Layout& l, const std::vector<int64_t>& perm);
// Index `index` of dim `axis`; the dim stays (size 1) when keep_dim.
bool gather_layout(Layout& l, int64_t axis, int64_t index, bool keep_dim);
// Strides per dim when each is a single piece (0 for a dim of size 1).
bool layout_strides(const Layout& l, Shape* strides);

// `value` as a view of `base`: element idx of value is base's flat element
// offset + sum(idx[d] * strides[d]).
struct StridedView {
  int base = -1;
  int64_t offset = 0;
  Shape strides;
};

// `v` as a view of the earliest value it reaches back through nodes that
// only move elements (not through nodes flagged in `stop`); at worst of
// itself (base == v, contiguous).
StridedView view_from_source(const graph::Graph& g, int v, const std::vector<char>* stop = nullptr);

// For a value `out` whose only reader starts a chain of such nodes (each
// value in it read once, none a graph output): the chain's last value
// `*end` and `out` as a view of it, so the producer of `out` can write
// `*end` directly. False when the chain is empty or no prefix of it is
// invertible (Reshape-like and Transpose nodes only). `chain` receives the
// chain's nodes.
bool view_into_sink(const graph::Graph& g, const std::vector<std::vector<int>>& users, int out, int* end,
                    StridedView* view, std::vector<int>* chain);

}  // namespace twinfer::passes
