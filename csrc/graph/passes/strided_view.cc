#include "graph/passes/strided_view.h"

#include <algorithm>
#include <deque>

#include "graph/passes/rewrite_util.h"

namespace twinfer::passes {

namespace {

using Piece = std::pair<int64_t, int64_t>;  // size, stride

// Drops pieces of size 1 and merges neighbours that are one run
// (outer stride == inner size * inner stride).
void canonical(std::vector<Piece>& v) {
  std::vector<Piece> out;
  for (const Piece& p : v) {
    if (p.first == 1) continue;
    if (!out.empty() && out.back().second == p.first * p.second) {
      out.back() = {out.back().first * p.first, p.second};
    } else {
      out.push_back(p);
    }
  }
  v = std::move(out);
}

bool is_transpose(const graph::Node& n) { return n.domain.empty() && n.op_type == "Transpose"; }

std::vector<int64_t> transpose_perm(const graph::Node& n, size_t rank) {
  std::vector<int64_t> perm = n.attr_ints("perm");
  if (perm.empty())
    for (size_t d = 0; d < rank; ++d) perm.push_back(static_cast<int64_t>(rank - 1 - d));
  return perm;
}

// Gather of one constant index (a scalar, or one element: the dim stays).
bool gather_index(const graph::Graph& g, const graph::Node& n, int64_t* index, bool* keep) {
  if (!n.domain.empty() || n.op_type != "Gather" || n.inputs.size() != 2 || n.inputs[1] < 0) return false;
  const graph::Value& iv = g.values[n.inputs[1]];
  if (!iv.is_constant() || iv.constant.numel() != 1 || iv.constant.shape().size() > 1) return false;
  if (iv.constant.dtype() == DType::kInt64) *index = iv.constant.data_as<int64_t>()[0];
  else if (iv.constant.dtype() == DType::kInt32) *index = iv.constant.data_as<int32_t>()[0];
  else return false;
  *keep = iv.constant.shape().size() == 1;
  return true;
}

// Applies node n (reading `in`) to layout l: false when it cannot be followed.
bool apply(const graph::Graph& g, const graph::Node& n, Layout& l) {
  Shape in, out;
  if (!concrete_shape(g, n.inputs[0], &in) || n.outputs.empty() || !concrete_shape(g, n.outputs[0], &out)) return false;
  if (is_reshape_like(n)) return reshape_layout(l, out);
  if (is_transpose(n)) {
    const std::vector<int64_t> perm = transpose_perm(n, in.size());
    if (!valid_perm(perm, in.size())) return false;
    transpose_layout(l, perm);
    return true;
  }
  int64_t index = 0;
  bool keep = false;
  if (gather_index(g, n, &index, &keep)) {
    const int64_t rank = static_cast<int64_t>(in.size());
    int64_t axis = n.attr_int("axis", 0);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank) return false;
    if (index < 0) index += in[axis];
    if (index < 0 || index >= in[axis]) return false;
    return gather_layout(l, axis, index, keep);
  }
  return false;
}

bool moves_only(const graph::Graph& g, const graph::Node& n) {
  if (n.inputs.empty() || n.inputs[0] < 0 || n.outputs.size() != 1) return false;
  int64_t index;
  bool keep;
  return is_reshape_like(n) || is_transpose(n) || gather_index(g, n, &index, &keep);
}

}  // namespace

bool is_reshape_like(const graph::Node& n) {
  if (!n.domain.empty()) return false;
  return n.op_type == "Reshape" || n.op_type == "Flatten" || n.op_type == "Squeeze" || n.op_type == "Unsqueeze" ||
         n.op_type == "Identity";
}

bool valid_perm(const std::vector<int64_t>& perm, size_t rank) {
  if (perm.size() != rank) return false;
  std::vector<char> seen(rank, 0);
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(rank) || seen[p]) return false;
    seen[p] = 1;
  }
  return true;
}

Layout contiguous_layout(const Shape& shape) {
  Layout l;
  int64_t stride = 1;
  l.dims.resize(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] != 1) l.dims[d].push_back({shape[d], stride});
    stride *= shape[d];
  }
  return l;
}

bool reshape_layout(Layout& l, const Shape& to) {
  std::vector<Piece> flat;
  for (const auto& d : l.dims) flat.insert(flat.end(), d.begin(), d.end());
  canonical(flat);
  std::deque<Piece> left(flat.begin(), flat.end());
  std::vector<std::vector<Piece>> dims;
  for (int64_t n : to) {
    if (n <= 0) return false;  // empty tensors are not worth a view
    std::vector<Piece> dim;
    int64_t need = n;
    while (need > 1) {
      if (left.empty()) return false;
      const auto [size, stride] = left.front();
      if (size <= need) {
        if (need % size) return false;
        dim.push_back(left.front());
        left.pop_front();
        need /= size;
      } else {
        if (size % need) return false;
        dim.push_back({need, stride * (size / need)});  // the outer part of the piece
        left.front() = {size / need, stride};
        need = 1;
      }
    }
    canonical(dim);
    dims.push_back(std::move(dim));
  }
  if (!left.empty()) return false;
  l.dims = std::move(dims);
  return true;
}

void transpose_layout(Layout& l, const std::vector<int64_t>& perm) {
  std::vector<std::vector<Piece>> dims;
  for (int64_t p : perm) dims.push_back(l.dims[p]);
  l.dims = std::move(dims);
}

bool gather_layout(Layout& l, int64_t axis, int64_t index, bool keep_dim) {
  if (axis < 0 || axis >= static_cast<int64_t>(l.dims.size())) return false;
  auto& dim = l.dims[axis];
  for (size_t p = dim.size(); p-- > 0;) {  // the index in the pieces' mixed radix, inner first
    l.offset += (index % dim[p].first) * dim[p].second;
    index /= dim[p].first;
  }
  if (index) return false;
  if (keep_dim) dim.clear();
  else l.dims.erase(l.dims.begin() + axis);
  return true;
}

bool layout_strides(const Layout& l, Shape* strides) {
  strides->clear();
  for (auto dim : l.dims) {
    canonical(dim);
    if (dim.size() > 1) return false;
    strides->push_back(dim.empty() ? 0 : dim[0].second);
  }
  return true;
}

StridedView view_from_source(const graph::Graph& g, int v, const std::vector<char>* stop) {
  // The chain back from v, nearest first, as far as nodes only move elements.
  std::vector<int> chain;
  for (int cur = v; cur >= 0 && chain.size() < 32;) {
    const int p = g.values[cur].producer;
    if (p < 0 || (stop && (*stop)[p]) || !moves_only(g, g.nodes[p])) break;
    chain.push_back(p);
    cur = g.nodes[p].inputs[0];
  }
  // The earliest start from which every step follows.
  for (size_t start = chain.size(); start > 0; --start) {
    const int base = g.nodes[chain[start - 1]].inputs[0];
    Shape shape;
    // An empty tensor has nothing to view (and its size-0 pieces divide by zero).
    if (!concrete_shape(g, base, &shape) || shape_numel(shape) == 0) continue;
    Layout l = contiguous_layout(shape);
    bool ok = true;
    for (size_t k = start; k-- > 0 && ok;) ok = apply(g, g.nodes[chain[k]], l);
    StridedView view;
    if (ok && layout_strides(l, &view.strides)) {
      view.base = base;
      view.offset = l.offset;
      return view;
    }
  }
  StridedView self;
  self.base = v;
  Shape shape;
  if (concrete_shape(g, v, &shape)) self.strides = contiguous_strides(shape);
  return self;
}

bool view_into_sink(const graph::Graph& g, const std::vector<std::vector<int>>& users, int out, int* end,
                    StridedView* view, std::vector<int>* chain) {
  chain->clear();
  for (int cur = out; chain->size() < 32;) {
    if (is_graph_output(g, cur) || users[cur].size() != 1) break;
    const graph::Node& n = g.nodes[users[cur][0]];
    if (!(is_reshape_like(n) || is_transpose(n)) || n.inputs.empty() || n.inputs[0] != cur || n.outputs.size() != 1 ||
        n.outputs[0] < 0)
      break;
    chain->push_back(users[cur][0]);
    cur = n.outputs[0];
  }
  // The longest prefix whose inverse follows: from its end back to `out`.
  for (; !chain->empty(); chain->pop_back()) {
    const int last = g.nodes[chain->back()].outputs[0];
    Shape shape;
    if (!concrete_shape(g, last, &shape) || shape_numel(shape) == 0) continue;
    Layout l = contiguous_layout(shape);
    bool ok = true;
    for (size_t k = chain->size(); k-- > 0 && ok;) {
      const graph::Node& n = g.nodes[(*chain)[k]];
      Shape in;
      ok = concrete_shape(g, n.inputs[0], &in);
      if (!ok) break;
      if (is_transpose(n)) {
        const std::vector<int64_t> perm = transpose_perm(n, in.size());
        ok = valid_perm(perm, in.size());
        if (!ok) break;
        std::vector<int64_t> inverse(perm.size());
        for (size_t d = 0; d < perm.size(); ++d) inverse[perm[d]] = static_cast<int64_t>(d);
        transpose_layout(l, inverse);
      } else {
        ok = reshape_layout(l, in);
      }
    }
    if (ok && layout_strides(l, &view->strides)) {
      *end = last;
      view->base = last;
      view->offset = l.offset;
      return true;
    }
  }
  return false;
}

}  // namespace twinfer::passes
