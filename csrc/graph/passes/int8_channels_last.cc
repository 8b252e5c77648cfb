#include "graph/passes/int8_channels_last.h"

#include "graph/domains.h"
#include "graph/passes/rewrite_util.h"
#include "ops/quant/qlinear_fused.h"

namespace twinfer::passes {

namespace {

bool is_qconv(const graph::Node& n) { return n.domain == kTwinferDomain && n.op_type == quant::kQConvOp; }

void set_flag(graph::Node& n, const char* name) {
  graph::Attribute a;
  a.type = graph::Attribute::Type::kInt;
  a.i = 1;
  n.attrs[name] = a;
}

}  // namespace

int int8_channels_last(graph::Graph& g, const PassContext& ctx) {
  // oneDNN's int8 convolutions and the CUDA ones (backends/cuda/gemm_qlinear.cc,
  // whose GEMM writes positions x channels) both read and write NHWC as it is.
  if (ctx.backend != Backend::kCPU && ctx.backend != Backend::kCUDA) return 0;
  const auto users = value_users(g);
  int kept = 0;
  for (auto& n : g.nodes) {
    if (!is_qconv(n) || n.outputs.empty() || n.outputs[0] < 0) continue;
    const int y = n.outputs[0];
    const auto& yv = g.values[y];
    if (yv.dtype != DType::kInt8 && yv.dtype != DType::kUInt8) continue;
    if (!yv.has_shape || yv.shape.size() < 3 || yv.shape.size() > 5) continue;
    if (users[y].empty() || is_graph_output(g, y)) continue;
    bool ok = true;
    for (int u : users[y]) {
      const graph::Node& r = g.nodes[u];
      ok = ok && is_qconv(r) && r.inputs[quant::kQX] == y;
      for (size_t k = 0; ok && k < r.inputs.size(); ++k) ok = k == quant::kQX || r.inputs[k] != y;
    }
    if (!ok) continue;
    set_flag(n, "y_channels_last");
    for (int u : users[y]) set_flag(g.nodes[u], "x_channels_last");
    ++kept;
  }
  if (kept) ctx.note("int8_channels_last: " + std::to_string(kept) + " QConv outputs stay NHWC between QConvs");
  return kept;
}

}  // namespace twinfer::passes
