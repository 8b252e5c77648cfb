#include "graph/passes/rewrite_check.h"

#include <vector>

#include "ops/kernel.h"
#include "ops/schema.h"

namespace twinfer::passes {

namespace {

// `got` says no less than `want` about the value: same dtype; where want's
// rank or a dim is known, got's is the same (a symbol must stay that symbol).
bool same_type(const graph::Value& want, const graph::Value& got, std::string* why) {
  if (want.dtype != DType::kUndefined && got.dtype != want.dtype) {
    *why = std::string("gives ") + dtype_name(got.dtype) + " instead of " + dtype_name(want.dtype);
    return false;
  }
  if (!want.has_shape) return true;
  bool ok = got.has_shape && got.shape.size() == want.shape.size();
  for (size_t d = 0; ok && d < want.shape.size(); ++d) {
    const Dim& w = want.shape[d];
    const Dim& h = got.shape[d];
    if (w.known()) ok = h.known() && h.value == w.value;
    else if (!w.symbol.empty()) ok = h.known() ? false : h.symbol == w.symbol;
  }
  if (!ok)
    *why = "gives shape " + (got.has_shape ? sym_shape_str(got.shape) : std::string("of unknown rank")) +
           " instead of " + sym_shape_str(want.shape);
  return ok;
}

bool all_concrete(const graph::Graph& g, const std::vector<int>& ids) {
  for (int v : ids)
    if (v >= 0 && (!g.values[v].has_shape || !sym_shape_known(g.values[v].shape))) return false;
  return true;
}

bool has_supporting_kernel(const graph::Graph& g, const graph::Node& n, const PassContext& ctx, std::string* why) {
  for (Backend b : {ctx.backend, Backend::kCPU}) {
    KernelBuildInfo info(g, n, ctx.opset, b, ctx.precision);
    std::string reason;
    try {
      if (select_kernel(info, &reason)) return true;
    } catch (const Error& e) {
      reason = e.what();
    }
    *why = "no kernel supports it: " + reason;
    if (b == Backend::kCPU) break;
  }
  return false;
}

}  // namespace

bool rewrite_fits(graph::Graph& g, const graph::Node& candidate, const PassContext& ctx, std::string* why) {
  std::string scratch;
  if (!why) why = &scratch;
  const OpSchema* schema = find_schema(candidate.domain, candidate.op_type);
  if (!schema) {
    *why = "no shape rule for " + candidate.domain + "::" + candidate.op_type;
    return false;
  }
  // The rule writes the outputs' types into the graph: keep what is there
  // now, to compare against and to put back.
  std::vector<graph::Value> before;
  for (int o : candidate.outputs)
    if (o >= 0) before.push_back(g.values[o]);
  auto restore = [&] {
    size_t k = 0;
    for (int o : candidate.outputs)
      if (o >= 0) g.values[o] = before[k++];
  };
  bool ok = true;
  try {
    InferContext ic(g, candidate, ctx.opset);
    schema->infer(ic);
    size_t k = 0;
    for (int o : candidate.outputs)
      if (o >= 0 && ok) ok = same_type(before[k++], g.values[o], why);
  } catch (const Error& e) {
    *why = e.what();
    ok = false;
  }
  restore();
  if (!ok) return false;
  std::vector<int> ids = candidate.inputs;
  ids.insert(ids.end(), candidate.outputs.begin(), candidate.outputs.end());
  if (all_concrete(g, ids) && !has_supporting_kernel(g, candidate, ctx, why)) return false;
  return true;
}

}  // namespace twinfer::passes
