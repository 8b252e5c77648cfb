// Subgraphs (the bodies of If, Loop, Scan) may read values of the graphs
// around them by name. capture_implicit_inputs makes those reads explicit:
// every node that owns subgraphs gets the outer values they read appended to
// its inputs, and their names recorded in the node's "__implicit" attribute.
// Passes then see the dependency (no producer is dropped or reordered away),
// and kernels bind the names to the tensors they receive.
#pragma once
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/ir.h"

namespace twinfer::graph {

constexpr const char* kImplicitAttr = "__implicit";

// Rewrites g and, recursively, every subgraph in it. At the top level a name
// no graph defines is a kModelFormat error naming the node.
void capture_implicit_inputs(Graph& g, bool top_level = true);

// Names a subgraph reads that it does not define (its free variables), in
// first-use order. Assumes capture_implicit_inputs ran on the subgraph.
std::vector<std::string> free_names(const Graph& sub);

// Number of a node's inputs that are its own (not captured outer values).
size_t explicit_input_count(const Node& n);

// The outer values a node's subgraphs read, as value ids of the node's
// graph, by the name the subgraphs read them by.
std::unordered_map<std::string, int> captured_inputs(const Node& n);

}  // namespace twinfer::graph
