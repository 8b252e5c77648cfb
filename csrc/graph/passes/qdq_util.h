// What the passes over imported QDQ graphs ask of a QuantizeLinear /
// DequantizeLinear node: its per-tensor parameters.
#pragma once
#include <cstdint>

#include "graph/ir.h"

namespace twinfer::passes {

struct QParams {
  float scale = 0.f;
  int64_t zero = 0;
  DType type = DType::kUndefined;  // the integer side: uint8 / int8
  bool operator==(const QParams& o) const { return scale == o.scale && zero == o.zero && type == o.type; }
};

// The value an Identity chain ending in v copies (v itself when none; at
// most 8 hops). The TorchScript exporter shares equal initializers (ResNet's
// bias vectors) through Identity nodes, and onnxruntime's quantizer keeps
// them behind its DequantizeLinear / QLinear nodes; these passes run before
// constant folding, and the fused nodes read the constant directly.
int behind_identity(const graph::Graph& g, int v);

// v's constant, also behind Identity nodes; nullptr when v is computed.
const Tensor* constant_behind_identity(const graph::Graph& g, int v);

// The per-tensor parameters of QuantizeLinear/DequantizeLinear node `n`
// whose integer side has type `q`: a constant float32 scale of one element,
// a constant zero point of type q (or none: 0), no blocks, default precision.
// False for anything else (int16, per-axis, blocked, computed scales).
bool per_tensor_qparams(const graph::Graph& g, const graph::Node& n, DType q, int64_t opset, QParams* p);

// The DequantizeLinear producing float value v with per-tensor parameters,
// or nullptr; `skip` marks nodes already rewritten away (may be null).
const graph::Node* per_tensor_dequantize(const graph::Graph& g, int v, int64_t opset, QParams* p,
                                         const std::vector<char>* skip = nullptr);

}  // namespace twinfer::passes
