#include "graph/passes/qdq_util.h"

namespace twinfer::passes {

namespace {

int64_t scalar_int(const Tensor& t) {
  switch (t.dtype()) {
    case DType::kInt8: return *t.data_as<int8_t>();
    case DType::kUInt8: return *t.data_as<uint8_t>();
    default: return 0;
  }
}

}  // namespace

int behind_identity(const graph::Graph& g, int v) {
  for (int hops = 0; v >= 0 && hops < 8; ++hops) {
    if (g.values[v].is_constant()) return v;
    const int p = g.values[v].producer;
    if (p < 0) return v;
    const graph::Node& n = g.nodes[p];
    if (!n.domain.empty() || n.op_type != "Identity" || n.inputs.empty()) return v;
    v = n.inputs[0];
  }
  return v;
}

const Tensor* constant_behind_identity(const graph::Graph& g, int v) {
  v = behind_identity(g, v);
  return v >= 0 && g.values[v].is_constant() ? &g.values[v].constant : nullptr;
}

bool per_tensor_qparams(const graph::Graph& g, const graph::Node& n, DType q, int64_t opset, QParams* p) {
  if (q != DType::kInt8 && q != DType::kUInt8) return false;
  if (n.inputs.size() < 2 || n.inputs[1] < 0 || (opset >= 21 && n.attr_int("block_size", 0) != 0)) return false;
  if (n.op_type == "QuantizeLinear" && opset >= 23 && n.attr_int("precision", 0) != 0) return false;
  const auto& s = g.values[n.inputs[1]];
  if (!s.is_constant() || s.constant.dtype() != DType::kFloat32 || s.constant.numel() != 1) return false;
  p->scale = *s.constant.data_as<float>();
  p->type = q;
  p->zero = 0;
  if (n.inputs.size() > 2 && n.inputs[2] >= 0) {
    const auto& z = g.values[n.inputs[2]];
    if (!z.is_constant() || z.constant.numel() != 1 || z.constant.dtype() != q) return false;
    p->zero = scalar_int(z.constant);
  }
  return p->scale > 0.f;
}

const graph::Node* per_tensor_dequantize(const graph::Graph& g, int v, int64_t opset, QParams* p,
                                         const std::vector<char>* skip) {
  const int d = v >= 0 ? g.values[v].producer : -1;
  if (d < 0 || (skip && (*skip)[d])) return nullptr;
  const graph::Node& dq = g.nodes[d];
  if (!dq.domain.empty() || dq.op_type != "DequantizeLinear" || dq.inputs.empty() || dq.inputs[0] < 0) return nullptr;
  return per_tensor_qparams(g, dq, g.values[dq.inputs[0]].dtype, opset, p) ? &dq : nullptr;
}

}  // namespace twinfer::passes
