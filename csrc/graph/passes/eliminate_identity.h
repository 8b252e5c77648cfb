// Identity, inference-mode Dropout and no-op Casts forward their input: their
// readers read the input directly and the node goes away. Nodes whose output
// is a graph output stay (the output keeps its name).
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {
int eliminate_identity(graph::Graph& g, const PassContext& ctx);
}
