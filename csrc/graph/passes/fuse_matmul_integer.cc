#include "graph/passes/fuse_matmul_integer.h"

#include <vector>

#include "graph/domains.h"
#include "graph/passes/rewrite_check.h"
#include "graph/passes/rewrite_util.h"
#include "ops/kernel.h"
#include "ops/quant/qlinear_fused.h"

namespace twinfer::passes {

namespace {

// Value v holds exactly one element (its shape is known: [] or [1, ...]).
bool one_element(const graph::Graph& g, int v) {
  const graph::Value& val = g.values[v];
  if (!val.has_shape) return false;
  for (const Dim& d : val.shape)
    if (!d.known() || d.value != 1) return false;
  return true;
}

// A constant float32 with one element or `n` elements in one dimension.
bool per_column_constant(const graph::Graph& g, int v, const Dim& n, bool vector_only) {
  const graph::Value& val = g.values[v];
  if (!val.is_constant() || val.constant.dtype() != DType::kFloat32) return false;
  const Shape& s = val.constant.shape();
  if (!vector_only && val.constant.numel() == 1 && s.size() <= 1) return true;
  return s.size() == 1 && n.known() && s[0] == n.value;
}

bool all_zero_constant(const graph::Graph& g, int v) {
  const graph::Value& val = g.values[v];
  if (!val.is_constant()) return false;
  const Tensor& t = val.constant;
  if (t.dtype() != DType::kInt8 && t.dtype() != DType::kUInt8) return false;
  const char* p = static_cast<const char*>(t.data());
  for (int64_t i = 0; i < t.numel(); ++i)
    if (p[i] != 0) return false;
  return true;
}

// The only reader of value v when it has one and is no graph output, else -1.
int sole_reader(const graph::Graph& g, const std::vector<std::vector<int>>& users, int v) {
  return users[v].size() == 1 && !is_graph_output(g, v) ? users[v][0] : -1;
}

bool plain(const graph::Node& n, const char* op, size_t inputs) {
  return n.domain.empty() && n.op_type == op && n.inputs.size() == inputs && n.outputs.size() == 1;
}

}  // namespace

int fuse_matmul_integer(graph::Graph& g, const PassContext& ctx) {
  if (!ctx.allow_fusion || ctx.backend != Backend::kCPU ||
      !any_kernel_for(kTwinferDomain, quant::kQMatMulOp, ctx.backend))
    return 0;
  const std::vector<std::vector<int>> users = value_users(g);
  std::vector<char> dead(g.nodes.size(), 0);
  std::vector<graph::Node> added;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const graph::Node& mm = g.nodes[i];
    if (!mm.domain.empty() || mm.op_type != "MatMulInteger" || mm.inputs.size() < 2 || mm.outputs.size() != 1)
      continue;
    const int a = mm.inputs[0], w = mm.inputs[1];
    const int za = mm.inputs.size() > 2 ? mm.inputs[2] : -1;
    const int zw = mm.inputs.size() > 3 ? mm.inputs[3] : -1;
    const DType at = g.values[a].dtype;
    const graph::Value& wv = g.values[w];
    // QMatMul: int8 weights [K, N] with zero point 0, x with one zero point.
    if ((at != DType::kUInt8 && at != DType::kInt8) || !wv.is_constant() || wv.constant.dtype() != DType::kInt8 ||
        wv.constant.shape().size() != 2 || (zw >= 0 && !all_zero_constant(g, zw)) ||
        (za >= 0 && !one_element(g, za)))
      continue;
    const Dim n_dim(wv.constant.shape()[1]);
    const int ci = sole_reader(g, users, mm.outputs[0]);
    if (ci < 0 || !plain(g.nodes[ci], "Cast", 1) ||
        g.nodes[ci].attr_int("to", 0) != dtype_to_onnx(DType::kFloat32))
      continue;
    const int mi = sole_reader(g, users, g.nodes[ci].outputs[0]);
    if (mi < 0 || !plain(g.nodes[mi], "Mul", 2)) continue;
    const graph::Node& mul = g.nodes[mi];
    const int scale = mul.inputs[0] == g.nodes[ci].outputs[0] ? mul.inputs[1] : mul.inputs[0];
    // The scale: Mul(x_scale, w_scale), x_scale one float32 (computed at run
    // time), w_scale a constant of one element or one per column.
    const int sp = g.values[scale].producer;
    if (sp < 0 || !plain(g.nodes[sp], "Mul", 2)) continue;
    int x_scale = -1, w_scale = -1;
    for (int side = 0; side < 2 && x_scale < 0; ++side) {
      const int p = g.nodes[sp].inputs[side], q = g.nodes[sp].inputs[1 - side];
      if (g.values[p].dtype == DType::kFloat32 && one_element(g, p) && per_column_constant(g, q, n_dim, false)) {
        x_scale = p;
        w_scale = q;
      }
    }
    if (x_scale < 0) continue;
    // A bias Add joins when it is the product's only reader.
    int out = mul.outputs[0], bias = -1, add = -1;
    const int ai = sole_reader(g, users, out);
    if (ai >= 0 && plain(g.nodes[ai], "Add", 2)) {
      const graph::Node& an = g.nodes[ai];
      const int other = an.inputs[0] == out ? an.inputs[1] : an.inputs[0];
      if (an.inputs[0] != an.inputs[1] && per_column_constant(g, other, n_dim, true)) {
        bias = other;
        add = ai;
        out = an.outputs[0];
      }
    }
    graph::Node f;
    f.name = mm.name;
    f.domain = kTwinferDomain;
    f.op_type = quant::kQMatMulOp;
    f.inputs = {a, x_scale, za, w, w_scale, bias};
    f.outputs = {out};
    if (!rewrite_fits(g, f, ctx)) continue;
    dead[i] = dead[ci] = dead[mi] = 1;
    if (add >= 0) dead[add] = 1;
    added.push_back(std::move(f));
  }
  if (added.empty()) return 0;
  const int fused = static_cast<int>(added.size());
  replace_fused_nodes(g, dead, added);
  ctx.note("fuse_matmul_integer: " + std::to_string(fused) +
           " MatMulInteger -> Cast -> Mul [-> Add] -> com.twinfer::QMatMul (x's scale and zero point per run)");
  return fused;
}

}  // namespace twinfer::passes
