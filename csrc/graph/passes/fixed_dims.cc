#include "graph/passes/fixed_dims.h"

#include "graph/passes/infer_and_fold.h"

namespace twinfer::passes {

DimMask changed_dims(const std::vector<Shape>& a, const std::vector<Shape>& b) {
  DimMask m(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const bool same_rank = i < b.size() && a[i].size() == b[i].size();
    m[i].assign(a[i].size(), 0);
    for (size_t d = 0; d < a[i].size(); ++d) m[i][d] = !same_rank || a[i][d] != b[i][d];
  }
  return m;
}

bool any_dim(const DimMask& m) {
  for (const auto& dims : m)
    for (char c : dims)
      if (c) return true;
  return false;
}

std::vector<Shape> mask_dims(const std::vector<Shape>& shapes, const DimMask& varying) {
  std::vector<Shape> r = shapes;
  for (size_t i = 0; i < r.size() && i < varying.size(); ++i)
    for (size_t d = 0; d < r[i].size() && d < varying[i].size(); ++d)
      if (varying[i][d]) r[i][d] = -1;
  return r;
}

void bind_fixed_dims(graph::Graph& g, const std::vector<Shape>& shapes, const DimMask& varying,
                     const PassContext& pc) {
  for (size_t i = 0; i < g.inputs.size() && i < shapes.size(); ++i) {
    graph::Value& v = g.values[g.inputs[i]];
    if (!v.has_shape || v.shape.size() != shapes[i].size()) {  // rank undeclared: take the run's
      v.has_shape = true;
      v.shape.assign(shapes[i].size(), Dim());
    }
    for (size_t d = 0; d < shapes[i].size(); ++d)
      if (!(i < varying.size() && d < varying[i].size() && varying[i][d])) v.shape[d] = Dim(shapes[i][d]);
  }
  infer_and_fold(g, pc, true);
  g.compact();
}

}  // namespace twinfer::passes
