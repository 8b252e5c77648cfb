// Common subexpressions: a node that does what an earlier one does (same op,
// attributes and inputs) is dropped, its readers reading the earlier one's
// outputs; small constants equal in type, shape and bytes become one value
// first, so such nodes see the same inputs. Exporters and the contrib
// rewrites repeat shape chains and masks per layer (a language model's 32
// GroupQueryAttention layers each build the same mask from the same input):
// one copy runs instead of 32.
//
// Left alone: nodes writing a graph output (its name stays), nodes with
// subgraphs, random generators, and the GEMMs and convolutions (a repeated
// one is a layer of its own to int8's keep_float and the reports).
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {

// Returns how many nodes and constants went.
int eliminate_common_subexpressions(graph::Graph& g, const PassContext& ctx);

}  // namespace twinfer::passes
