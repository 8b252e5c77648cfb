#include "graph/passes/inline_if.h"

#include <cstdlib>
#include <cstring>

#include "graph/passes/pass_switch.h"
#include "graph/passes/rewrite_util.h"
#include "graph/passes/splice_body.h"
#include "graph/subgraph.h"

namespace twinfer::passes {

namespace {

// The taken branch of If node `n` when its condition is a one-element
// constant, else null.
const graph::Graph* taken_branch(const graph::Graph& g, const graph::Node& n) {
  if (!n.domain.empty() || n.op_type != "If" || n.inputs.empty() || n.inputs[0] < 0) return nullptr;
  const graph::Value& cond = g.values[n.inputs[0]];
  if (!cond.is_constant() || cond.constant.dtype() != DType::kBool || cond.constant.numel() != 1) return nullptr;
  const graph::Attribute* a = n.attr(*cond.constant.data_as<bool>() ? "then_branch" : "else_branch");
  return a && a->g ? a->g.get() : nullptr;
}

// Moves `branch`'s nodes into g in place of If node `at` (erased by the
// caller); false, changing nothing, where a branch output is unknown to it.
bool splice(graph::Graph& g, size_t at, const graph::Graph& branch, std::vector<graph::Node>* added) {
  const graph::Node n = g.nodes[at];
  if (branch.outputs.size() != n.outputs.size()) return false;
  // Outer values the branch reads, by name: the If's captured inputs.
  const std::string prefix = n.name.empty() ? "if" : n.name;
  const std::vector<int> results = splice_body(g, branch, prefix, {}, graph::captured_inputs(n), added);
  if (results.empty() && !branch.outputs.empty()) return false;
  // The If's results: their readers read the branch's instead; a graph
  // output keeps its name through an Identity.
  for (size_t j = 0; j < n.outputs.size(); ++j) {
    const int o = n.outputs[j], r = results[j];
    if (o < 0) continue;
    if (is_graph_output(g, o)) {
      graph::Node copy;
      copy.name = prefix + "/output_" + std::to_string(j);
      copy.op_type = "Identity";
      copy.inputs = {r};
      copy.outputs = {o};
      added->push_back(std::move(copy));
    } else {
      replace_uses(g, o, r);
      for (graph::Node& a : *added) {  // nodes spliced in earlier may read it too
        for (int& in : a.inputs)
          if (in == o) in = r;
      }
    }
  }
  return true;
}

}  // namespace

bool if_inlining_wanted() { return pass_enabled("TWINFER_INLINE_IF"); }

bool has_constant_if(const graph::Graph& g) {
  if (!if_inlining_wanted()) return false;
  for (const auto& n : g.nodes)
    if (taken_branch(g, n)) return true;
  return false;
}

int inline_constant_ifs(graph::Graph& g, const PassContext& pc) {
  if (!if_inlining_wanted()) return 0;
  const int count = rewrite_each_node(g, [&](size_t i, std::vector<graph::Node>& added) {
    const graph::Graph* branch = taken_branch(g, g.nodes[i]);
    return branch && splice(g, i, *branch, &added);
  });
  if (count) pc.note("inline_if: " + std::to_string(count) + " If node(s) with a constant condition inlined");
  return count;
}

}  // namespace twinfer::passes
