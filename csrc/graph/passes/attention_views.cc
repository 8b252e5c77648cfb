#include "graph/passes/attention_views.h"

#include <cstdlib>
#include <cstring>

#include "graph/domains.h"
#include "graph/passes/pass_switch.h"
#include "graph/passes/rewrite_util.h"
#include "graph/passes/rows_through_gemm.h"
#include "graph/passes/strided_view.h"
#include "ops/transformer/attention_views.h"

namespace twinfer::passes {

bool attention_views_wanted() { return pass_enabled("TWINFER_ATTENTION_VIEWS"); }

namespace {

bool concrete_4d(const graph::Graph& g, int v, Shape* s) {
  if (!concrete_shape(g, v, s) || s->size() != 4) return false;
  for (int64_t d : *s)
    if (d <= 0) return false;
  return true;
}

// The attribute of operand view `v` over dims `s` ([B, H, S, D]).
graph::Attribute view_attr(const StridedView& v, const Shape& s) {
  return ints_attr({v.offset, s[0], s[1], s[2], s[3], v.strides[0], v.strides[1], v.strides[2]});
}

bool is_attention(const graph::Node& n) { return n.domain == kTwinferDomain && n.op_type == "Attention"; }

// Row transposes beside the projections (ViT's [B, S] <-> [S, B]) moved to
// the attention's side of the GEMMs, where the views take them in: one
// rewrite at a time (each renumbers nodes), until none applies. Returns how
// many moved.
int move_row_transposes(graph::Graph& g) {
  int moved = 0;
  for (int round = 0; round < 64; ++round) {
    bool changed = false;
    const std::vector<std::vector<int>> users = value_users(g);
    for (size_t i = 0; i < g.nodes.size() && !changed; ++i) {
      const graph::Node& n = g.nodes[i];
      if (!is_attention(n) || n.outputs.empty() || n.outputs[0] < 0) continue;
      // !changed first: a rewrite re-sorts g.nodes, and n with them.
      for (size_t k = 0; !changed && k < 3 && k < n.inputs.size(); ++k) {
        const int base = view_from_source(g, n.inputs[k]).base;
        const int p = base >= 0 ? g.values[base].producer : -1;
        changed = p >= 0 && transpose_rows_after_gemm(g, users, p);
      }
      int end = -1;
      StridedView ov;
      std::vector<int> chain;
      if (!changed && view_into_sink(g, users, n.outputs[0], &end, &ov, &chain) && users[end].size() == 1 &&
          !is_graph_output(g, end))
        changed = transpose_rows_before_gemm(g, users, users[end][0]);
    }
    if (!changed) break;
    ++moved;
  }
  return moved;
}

}  // namespace

int attention_views(graph::Graph& g, const AttentionViewsOptions& o, const PassContext& ctx) {
  g.topo_sort();
  const int moved = move_row_transposes(g);
  const std::vector<std::vector<int>> users = value_users(g);
  std::vector<int> atts;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const graph::Node& n = g.nodes[i];
    tx::AttnViews existing;
    Shape s;
    if (n.domain == kTwinferDomain && n.op_type == "Attention" && n.inputs.size() >= 3 && n.inputs.size() <= 4 &&
        n.outputs.size() == 1 && concrete_4d(g, n.outputs[0], &s) && tx::read_attention_views(n, &existing).empty() &&
        !existing.any())
      atts.push_back(static_cast<int>(i));
  }

  // Outputs first: the copies after each output, written by the Attention
  // instead. A later Attention's operand is then traced back only as far as
  // such a taken-over chain's last value, which stays.
  std::vector<char> dead(g.nodes.size(), 0);
  std::vector<graph::Node> updated;
  std::vector<char> changed;
  int copies = 0;
  for (int i : atts) {
    graph::Node att = g.nodes[i];
    int end = -1;
    StridedView ov;
    std::vector<int> chain;
    bool took = false;
    if (view_into_sink(g, users, att.outputs[0], &end, &ov, &chain) && ov.strides[3] == 1 && ov.offset == 0) {
      graph::Node trial = att;
      for (int k = 0; k < 3; ++k) {  // views go together: the operands as they are, for now
        Shape s;
        if (!concrete_4d(g, att.inputs[k], &s)) break;
        trial.attrs[tx::kAttnViewAttrs[k]] = view_attr(StridedView{att.inputs[k], 0, contiguous_strides(s)}, s);
      }
      trial.outputs[0] = end;
      trial.attrs["out_view"] = ints_attr({ov.strides[0], ov.strides[1], ov.strides[2]});
      trial.attrs["out_shape"] = ints_attr(sym_shape_values(g.values[end].shape));
      if (one_node_accepted(g, trial, o.supports)) {
        for (int c : chain) dead[c] = 1;
        copies += static_cast<int>(chain.size());
        att = std::move(trial);
        took = true;
      }
    }
    updated.push_back(std::move(att));
    changed.push_back(took);
  }

  // Then the operands: each as a view of where its copies started.
  for (size_t a = 0; a < atts.size(); ++a) {
    graph::Node att = updated[a];
    bool moved = false;
    for (int k = 0; k < 3; ++k) {
      Shape s;
      if (!concrete_4d(g, att.inputs[k], &s)) {
        moved = false;
        break;
      }
      StridedView v = view_from_source(g, att.inputs[k], &dead);
      if (v.base < 0 || v.base == att.inputs[k] || v.strides[3] != 1) {  // itself; d must be contiguous
        v.base = att.inputs[k];
        v.offset = 0;
        v.strides = contiguous_strides(s);
      } else {
        moved = true;
      }
      att.inputs[k] = v.base;
      att.attrs[tx::kAttnViewAttrs[k]] = view_attr(v, s);
    }
    if (moved && one_node_accepted(g, att, o.supports)) {
      updated[a] = std::move(att);
      changed[a] = 1;
    }
  }

  int rewritten = 0;
  for (size_t a = 0; a < atts.size(); ++a)
    if (changed[a]) {
      g.nodes[atts[a]] = std::move(updated[a]);
      ++rewritten;
    }
  if (!rewritten) return moved;  // the moved transposes alone (still a change)
  erase_nodes(g, dead);
  const size_t before = g.nodes.size();
  g.remove_dead();  // the copies before the operands, where nothing else reads them
  copies += static_cast<int>(before - g.nodes.size());
  ctx.note("attention_views: " + std::to_string(rewritten) + " attention nodes read and write in place, " +
           std::to_string(copies) + " copies fewer (" + std::to_string(moved) +
           " row transposes moved across a projection first)");
  return rewritten;
}

}  // namespace twinfer::passes
