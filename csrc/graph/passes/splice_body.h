// Copies a subgraph's nodes into the graph around it: If's taken branch
// (inline_if.cc), FlexAttention's score_mod / prob_mod (expand_flex_attention.cc).
#pragma once
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/ir.h"

namespace twinfer::passes {

// Appends `body`'s nodes to `added` as nodes of g, named under `prefix`: the
// body's constants become g's constants, the values it computes new values
// of g (with its types and shapes), its inputs the values `bound` gives in
// order, and any other name it reads the value of g that `outer` maps it to
// (a node's captured inputs: graph::captured_inputs). Returns g's values of
// the body's outputs; empty where the body reads a name nothing binds, or
// has more inputs than `bound` (then `added` may hold some of its nodes:
// the caller drops them).
std::vector<int> splice_body(graph::Graph& g, const graph::Graph& body, const std::string& prefix,
                             const std::vector<int>& bound, const std::unordered_map<std::string, int>& outer,
                             std::vector<graph::Node>* added);

}  // namespace twinfer::passes
