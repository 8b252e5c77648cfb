// int8 activations between QConv nodes stay channels-last (NHWC): oneDNN's
// int8 convolutions run on channels-last data, so a QConv that reads or writes
// plain NCHW reorders on the way in and out; the CUDA QConv's GEMM writes
// positions x channels, which is NHWC. Where a QConv's output is read
// only by other QConvs, this pass marks the producer's `y_channels_last` and
// each reader's `x_channels_last`; the kernels then hand oneDNN the buffer as
// NHWC with no reorder. The value's logical shape stays NCHW (same bytes);
// nothing else reads it, since it is not a graph output.
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {

// Returns the number of values kept channels-last.
int int8_channels_last(graph::Graph& g, const PassContext& ctx);

}  // namespace twinfer::passes
