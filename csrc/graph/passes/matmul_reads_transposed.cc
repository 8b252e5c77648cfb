#include "graph/passes/matmul_reads_transposed.h"

#include "graph/passes/rewrite_check.h"
#include "graph/passes/rewrite_util.h"
#include "graph/passes/softmax_chain.h"

namespace twinfer::passes {

namespace {

bool is_op(const graph::Node& n, const char* op) { return n.domain.empty() && n.op_type == op; }

// Below this, transposing b costs less than building a kernel for its size.
constexpr int64_t kMinTransposedBytes = int64_t{4} << 20;

int rank_of(const graph::Graph& g, int v) {
  return v >= 0 && g.values[v].has_shape ? static_cast<int>(g.values[v].shape.size()) : -1;
}

// Whether perm keeps every axis but swaps the last two.
bool swaps_last_two(const std::vector<int64_t>& perm) {
  const size_t r = perm.size();
  if (r < 2 || perm[r - 1] != static_cast<int64_t>(r - 2) || perm[r - 2] != static_cast<int64_t>(r - 1)) return false;
  for (size_t d = 0; d + 2 < r; ++d)
    if (perm[d] != static_cast<int64_t>(d)) return false;
  return true;
}

}  // namespace

int matmul_reads_transposed(graph::Graph& g, const PassContext& pc) {
  if (pc.backend != Backend::kCPU) return 0;
  const std::vector<std::vector<int>> users = value_users(g);
  std::vector<char> dead(g.nodes.size(), 0);
  int folded = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const graph::Node& mm = g.nodes[i];
    if (!is_op(mm, "MatMul") || mm.inputs.size() != 2 || mm.outputs.empty() || mm.outputs[0] < 0) continue;
    const int t = sole_producer(g, users, dead, mm.inputs[1], static_cast<int>(i));
    if (t < 0 || !is_op(g.nodes[t], "Transpose") || g.nodes[t].inputs.empty()) continue;
    const int b = g.nodes[t].inputs[0];
    const int r = rank_of(g, b);
    if (r < 2 || rank_of(g, mm.inputs[0]) != r || !swaps_last_two(g.nodes[t].attr_ints("perm"))) continue;
    // Only a large b: an Einsum kernel is built per size (the MatMul has a
    // kernel for any size that plans share as a decoder's cache grows,
    // runtime/kernel_cache.h), 70-250 us, which a smaller copy beats.
    Shape bs;
    if (!concrete_shape(g, b, &bs) || shape_numel(bs) * static_cast<int64_t>(dtype_size(g.values[b].dtype)) <
                                          kMinTransposedBytes)
      continue;
    graph::Node ein;
    ein.name = mm.name.empty() ? "matmul_transposed" : mm.name + "/transposed";
    ein.op_type = "Einsum";
    ein.attrs["equation"] = string_attr("...ij,...kj->...ik");
    ein.inputs = {mm.inputs[0], b};
    ein.outputs = mm.outputs;
    if (!rewrite_fits(g, ein, pc)) continue;
    g.nodes[i] = std::move(ein);
    dead[t] = 1;
    ++folded;
  }
  if (folded) {
    erase_nodes(g, dead);
    pc.note("matmul_reads_transposed: " + std::to_string(folded) + " MatMul(a, Transpose(b)) -> Einsum reading b in place");
  }
  return folded;
}

}  // namespace twinfer::passes
