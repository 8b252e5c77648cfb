// A rewrite must never turn a loadable model into an error: before a pass
// puts a fused node in place of the nodes it replaces, it asks here whether
// that node is as valid as what it replaces. When not, the nodes stay unfused.
//
// This is the one place that knows what "as valid" means, so every pass asks
// the same question instead of each pattern re-deriving the fused op's
// shape rule (which is how a bias of shape [1, 1, N] once got through).
#pragma once
#include <string>

#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {

// Whether `candidate`, a node not (yet) in the graph whose outputs are the
// value ids it will produce, type-checks against the graph's current values:
//   - its op's shape rule accepts it (no throw);
//   - each output gets the dtype the value has now, and a shape that agrees
//     dim by dim with the one it has now (a dim known now must come out the
//     same; a rank known now must come out the same);
//   - when every input and output shape is concrete, some kernel of the
//     pass's backend (or the CPU) supports it.
// Leaves the graph as it was. `why` (optional) says what failed.
bool rewrite_fits(graph::Graph& g, const graph::Node& candidate, const PassContext& ctx, std::string* why = nullptr);

}  // namespace twinfer::passes
