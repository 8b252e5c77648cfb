// Identity, inference-mode Dropout, no-op Casts and the second Cast of a
// round trip through a wider type (Cast(Cast(x, float32), float16) of a
// float16 x) forward their input: their readers read the input directly and
// the node goes away. Nodes whose output
// is a graph output stay (the output keeps its name).
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {
int eliminate_identity(graph::Graph& g, const PassContext& ctx);
}
