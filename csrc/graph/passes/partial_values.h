// Partial values: shape arithmetic on dims known in part. An exporter
// computes a Reshape's target from Shape(x) -> Gather -> Concat; when x has
// one symbolic dim (a decoder's past length) nothing of that chain used to
// be known, and every shape downstream of the Reshape was lost with it. Here
// a small integer tensor (rank 0 or 1) carries the elements that are known
// (graph::Value::partial): Shape gives its input's known dims, selections
// (Gather, Slice, Concat, Unsqueeze, Squeeze, Reshape, Identity, Flatten,
// Expand, Tile, Split) move them, elementwise arithmetic and comparisons
// compute the elements whose operands are known, Where picks. Reshape,
// Expand and ConstantOfShape then size the dims they know, and a value
// known whole folds into a constant.
//
// The op semantics are the kernels': a selection runs its CPU kernel on the
// known elements with each unknown one replaced by a distinct sentinel (an
// output holding a sentinel came from an unknown element, since selections
// only move values); arithmetic runs its kernel with a placeholder for the
// unknown elements and keeps only the outputs whose operands were known.
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {

// The most elements a partial value has (a shape's rank is far below this).
constexpr int64_t kMaxPartialElements = 64;

// False when TWINFER_PARTIAL_VALUES=0 (for side-by-side measurements).
bool partial_values_enabled();

// Sets the partial values of `n`'s outputs from its inputs' constants,
// partial values and (Shape) dims. Returns true when `fold` and every output
// is known whole: they are then constants, and the caller drops `n`.
// What it cannot compute stays unknown for the node's rule (only an
// exception other than twinfer::Error, such as bad_alloc, passes through).
bool propagate_partial(graph::Graph& g, const graph::Node& n, const PassContext& ctx, bool fold);

}  // namespace twinfer::passes
