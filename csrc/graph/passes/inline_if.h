// An If whose condition is a constant is its taken branch: the branch's
// nodes move into the graph in the If's place (their outer reads bound to
// the values the If captured, their constants and results renamed apart),
// so they are planned, placed and fused like any other node instead of
// running through the control-flow kernel's evaluator on every run, on the
// host. Conditions become constants when a plan knows the input shapes (an
// exporter's `If(Equal(Shape(x)[1], 1))`) or a steering input's value
// (graph/passes/shape_inputs.h): silero VAD's `If(Equal(sr, 16000))`.
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {

// Inlines every If at g's top level whose condition is a constant; returns
// how many. The caller folds again afterwards, and calls again while it
// inlines: a branch's own Ifs have conditions that fold only then.
int inline_constant_ifs(graph::Graph& g, const PassContext& pc);

// Whether g has an If whose condition is a constant (and inlining is on):
// what is worth copying the graph for.
bool has_constant_if(const graph::Graph& g);

// False when TWINFER_INLINE_IF=0 (for side-by-side measurements): Ifs then
// always run as control flow.
bool if_inlining_wanted();

}  // namespace twinfer::passes
