#include "graph/passes/grouped_heads.h"

#include "graph/passes/rewrite_util.h"
#include "graph/passes/softmax_chain.h"

namespace twinfer::passes {

namespace {

bool is_op(const graph::Node& n, const char* op) { return n.domain.empty() && n.op_type == op; }

Shape concrete(const graph::Graph& g, int v) {
  Shape s;
  return v >= 0 && concrete_shape(g, v, &s) ? s : Shape{};
}

}  // namespace

int grouped_source(const graph::Graph& g, const std::vector<std::vector<int>>& users, const std::vector<char>& dead,
                   int v, int reader, int64_t opset, std::vector<int>* remove, int64_t* groups) {
  const int reshape = sole_producer(g, users, dead, v, reader);
  if (reshape < 0 || !is_op(g.nodes[reshape], "Reshape")) return -1;
  const int expand = sole_producer(g, users, dead, g.nodes[reshape].inputs[0], reshape);
  if (expand < 0 || !is_op(g.nodes[expand], "Expand")) return -1;
  const int unsq = sole_producer(g, users, dead, g.nodes[expand].inputs[0], expand);
  if (unsq < 0 || !is_op(g.nodes[unsq], "Unsqueeze")) return -1;
  const graph::Node& un = g.nodes[unsq];
  std::vector<int64_t> axes;
  if (opset < 13) {
    axes = un.attr_ints("axes");
  } else if (un.inputs.size() > 1 && un.inputs[1] >= 0 && g.values[un.inputs[1]].is_constant()) {
    const Tensor& t = g.values[un.inputs[1]].constant;
    if (t.dtype() == DType::kInt64) axes.assign(t.data_as<int64_t>(), t.data_as<int64_t>() + t.numel());
  }
  if (axes != std::vector<int64_t>{2} && axes != std::vector<int64_t>{-3}) return -1;
  const int x = un.inputs[0];
  const Shape xs = concrete(g, x), es = concrete(g, g.nodes[expand].outputs[0]), vs = concrete(g, v);
  if (xs.size() != 4 || es.size() != 5 || vs.size() != 4) return -1;
  const int64_t g_count = es[2];
  if (es != Shape{xs[0], xs[1], g_count, xs[2], xs[3]} || vs != Shape{xs[0], xs[1] * g_count, xs[2], xs[3]}) return -1;
  remove->insert(remove->end(), {reshape, expand, unsq});
  if (groups) *groups = g_count;
  return x;
}

}  // namespace twinfer::passes
