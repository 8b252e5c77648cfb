// Old-opset forms the kernels do not read, rewritten at load into the forms
// they do.
//
// Reshape before opset 5 takes its shape as an attribute: it becomes the
// constant input Reshape-5 reads.
//
// Before opset 7 the binary ops (Add, Sub, Mul, Div, Pow, And, Or, Xor,
// Equal, Greater, Less) broadcast only with broadcast=1, and then B lines up
// with A from dim `axis` on (B of shape [3] with axis=0 on A [3, 3] is a
// column), where from opset 7 on B lines up with A's trailing dims. Such a
// node gets an Unsqueeze that gives B trailing 1s, so the numpy rule the
// kernels follow means what the old one did; its attributes go. Run before
// shape inference, on the declared ranks: a node whose A or B rank is not
// declared is refused by name (computed silently wrong before).
#pragma once
#include <cstdint>

#include "graph/ir.h"

namespace twinfer::passes {

// Rewrites `g` and its subgraphs for a model of ai.onnx opset `opset`
// (nothing from opset 7 on); returns the number of nodes rewritten.
int rewrite_legacy_forms(graph::Graph& g, int64_t opset);

}  // namespace twinfer::passes
