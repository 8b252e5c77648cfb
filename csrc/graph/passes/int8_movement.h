// Data movement on int8: in a QDQ graph from another tool (onnxruntime's
// quantize_static puts a DequantizeLinear before and a QuantizeLinear after
// every op it quantizes), rewrites
//   DequantizeLinear(x_q; s, z) -> Reshape | Transpose | ... -> QuantizeLinear(s, z)
// into the movement op on x_q itself. Exact: these ops only move or select
// values, so quantizing again with the same scale and zero point gives back
// the same integers; a constant-mode Pad with fill 0 pads with the zero
// point, which is what 0 quantizes to. Saves a dequantize and a quantize pass
// per op. (MaxPool would be exact too but stays float: its int8 kernel is slow.)
//
// Conditions: per-tensor constant scale and zero point, equal on every data
// input (Concat) and on every QuantizeLinear reading the result; those
// QuantizeLinear nodes are the result's only readers and not graph outputs.
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {

// Returns the number of movement ops moved onto int8.
int int8_movement(graph::Graph& g, const PassContext& ctx);

}  // namespace twinfer::passes
