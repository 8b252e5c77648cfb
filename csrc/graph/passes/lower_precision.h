// precision="fp16" / "bf16" on a device: float32 values become `to` wherever
// the node that computes them can run in `to` (autocast, decided per node),
// with Cast nodes where a value crosses between the two: the graph's inputs
// and outputs keep the model's dtypes, ops that cannot run in `to` keep
// float32, so do outputs whose op defines them float32 (LayerNormalization's
// Mean / InvStdDev, by its shape rule), and float32 weights are converted
// once (the converter caches).
// Kernels accumulate reductions, normalisations and GEMMs in float32.
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
};

// Returns the number of nodes that now compute in `to`.
int lower_precision(graph::Graph& g, const LowerPrecisionOptions& o, PassContext& pc);

}  // namespace twinfer::passes
