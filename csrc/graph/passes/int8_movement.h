// Data movement on int8: in a QDQ graph from another tool (onnxruntime's
// quantize_static puts a DequantizeLinear before and a QuantizeLinear after
// every op it quantizes), rewrites
//   DequantizeLinear(x_q; s, z) -> Reshape | Transpose | ... -> QuantizeLinear(s, z)
// into the movement op on x_q itself. Exact: these ops only move or select
// values, so quantizing again with the same scale and zero point gives back
// the same integers; a constant-mode Pad with fill 0 pads with the zero
// point, which is what 0 quantizes to. Saves a dequantize and a quantize pass
// per op. MaxPool too (without its Indices output): the maximum of the
// integers is the integer of the maximum, quantization being monotonic.
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

// A MaxPool whose output is only quantized (insert_qdq's QuantizeLinear in a
// calibrated graph, or an imported QDQ model's; positive per-tensor scale): the QuantizeLinear moves before
// it, MaxPool -> Q becoming Q -> MaxPool on integers, which is exact for
// the same reason. fuse_qdq then gives the convolution before it an int8
// output: ResNet's stem no longer writes float32 for a float MaxPool (at
// batch 256, 822 MB written and read again). Returns the MaxPools moved.
// TWINFER_INT8_MAXPOOL=0 switches it off (pass_switch.h).
int quantize_before_maxpool(graph::Graph& g, const PassContext& ctx);

}  // namespace twinfer::passes
