// precision="fp16" / "bf16" on a device (and what int8 leaves in float, see
// LowerPrecisionOptions::quantized_ops_float32): float32 values become `to` node by
// node, after torch.autocast's lists (lower_precision.cc, rule_of): GEMMs,
// convolutions and attention always compute in `to` (their float32 operands
// cast); exp, log, pow, reciprocal, sums, products, cumulative sums and the
// model's own casts to float32 never do; every other op computes in the type
// its operands arrive in: in `to` when each float operand that is not a
// constant already is (a float32 graph input is float32), and none of its
// constants would change meaning in 16 bits (a scalar below the smallest
// normal, anything past the largest finite). Casts into `to` saturate (Clip
// first), as constants convert. The graph's inputs and outputs keep the model's dtypes, outputs
// whose op defines them float32 stay so (LayerNormalization's Mean /
// InvStdDev, by its shape rule), and float32 weights are converted once
// (the converter caches). Kernels accumulate reductions, normalisations and
// GEMMs in float32.
#pragma once
#include <functional>

#include "core/tensor.h"
#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {

struct LowerPrecisionOptions {
  DType to = DType::kFloat16;  // kFloat16 or kBFloat16
  // Whether `node` has a kernel when its float32 operands are `to`: asked of
  // a one-node graph holding the node with the lowered types.
  NodeSupport supports;
  // A float32 constant in `to` (the engine converts each weight once).
  std::function<Tensor(const Tensor& f32)> convert;
  // precision="int8" on a device: the quantization ops (Quantize/
  // DequantizeLinear, DynamicQuantizeLinear and the fused int8 ops built
  // from them) keep float32, their scales included (a per-channel scale of
  // 1e-6 is a subnormal in fp16); what the calibration left in float (an
  // attention, a softmax, an embedding, layer norms) computes in `to`, as
  // TensorRT's int8 engines with fp16 on do. The exception, in every mode:
  // a QMatMul's float x (per token) and float y are lowered with it (its
  // kernels read and write them in `to`, out_dtype; its scales stay float32),
  // unless that y is a graph output. QConv and QBinary keep float32 in every
  // mode (their kernels read float32 scales; an imported QDQ model at "fp16").
  bool quantized_ops_float32 = false;
};

// Returns the number of nodes that now compute in `to`.
int lower_precision(graph::Graph& g, const LowerPrecisionOptions& o, PassContext& pc);

}  // namespace twinfer::passes
