#include "graph/passes/infer_and_fold.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_set>

#include "ops/kernel.h"
#include "ops/schema.h"
#include "graph/passes/partial_values.h"

namespace twinfer::passes {

bool is_unfoldable(const graph::Node& n) {
  // Random generators differ per run; control flow is left to its kernels.
  static const std::unordered_set<std::string> kNever = {"RandomNormal", "RandomUniform", "RandomNormalLike",
                                                          "RandomUniformLike", "Multinomial", "Bernoulli",
                                                          "If", "Loop", "Scan"};
  return kNever.count(n.op_type) != 0;
}

// Shape and Size read only their input's dims, so they fold as soon as those
// dims are concrete, whatever the input's data. This is what turns exported
// Shape->Gather->Concat->Reshape chains into constant shapes once a plan's
// input shapes are known.
static bool reads_only_dims(const graph::Node& n) {
  return n.domain.empty() && (n.op_type == "Shape" || n.op_type == "Size");
}

static bool dims_known(const graph::Graph& g, const graph::Node& n) {
  if (n.inputs.empty() || n.inputs[0] < 0) return false;
  const auto& v = g.values[n.inputs[0]];
  return v.has_shape && sym_shape_known(v.shape);
}

static bool all_inputs_constant(const graph::Graph& g, const graph::Node& n) {
  if (reads_only_dims(n)) return dims_known(g, n);
  for (int in : n.inputs)
    if (in >= 0 && !g.values[in].is_constant()) return false;
  return true;
}

static bool outputs_fully_known(const graph::Graph& g, const graph::Node& n, size_t limit, bool* small) {
  size_t bytes = 0;
  for (int o : n.outputs) {
    if (o < 0) continue;
    const auto& v = g.values[o];
    // Sequences/optionals have no byte size: only run_dynamic can make them.
    if (!v.has_shape || !sym_shape_known(v.shape) || v.dtype == DType::kUndefined || dtype_is_container(v.dtype))
      return false;
    bytes += static_cast<size_t>(shape_numel(sym_shape_values(v.shape))) * dtype_size(v.dtype);
  }
  *small = bytes <= limit;
  return true;
}

// Runs the node's CPU kernel on its constant inputs and stores the outputs as
// constants. `dynamic`: output shapes are unknown; only kernels that allocate
// their own outputs (run_dynamic) can fold then.
bool fold_node(graph::Graph& g, const graph::Node& n, const PassContext& ctx, bool dynamic) {
  KernelBuildInfo info(g, n, ctx.opset, Backend::kCPU, Precision::kFP32);
  info.set_single_run(true);
  std::string why;
  const KernelDef* def = select_kernel(info, &why);
  // Evaluating eagerly, a node no kernel takes (a string input to a numeric
  // op, say) is the run's failure: say why now rather than "not evaluated".
  if (!def && ctx.evaluate_all) throw Error(ErrorKind::kUnsupportedOp, why, n.name, n.op_type);
  if (!def) return false;
  // An engine's evaluator keeps kernels from one run to the next.
  std::shared_ptr<const Kernel> kernel;
  if (ctx.evaluate_all && ctx.reuse && ctx.per_run) kernel = ctx.reuse->kernel(g, n, ctx.opset, *ctx.per_run);
  if (!kernel) kernel = def->create(info);
  if (dynamic && !kernel->dynamic_outputs()) return false;
  KernelContext kc;
  for (int in : n.inputs) {
    if (in < 0) {
      kc.inputs.push_back(TensorView{});
    } else if (!g.values[in].is_constant()) {
      // Only reached for dims-only ops: a view with the dims and no data.
      const auto& v = g.values[in];
      kc.inputs.push_back(TensorView{nullptr, v.dtype, sym_shape_values(v.shape)});
    } else {
      kc.inputs.push_back(g.values[in].constant.view());
    }
  }
  kc.num_threads = std::max(1, ctx.num_threads);
  if (dynamic) {
    std::vector<Tensor> outs = kernel->run_dynamic(kc);
    for (size_t i = 0; i < n.outputs.size() && i < outs.size(); ++i) {
      if (n.outputs[i] < 0) continue;
      auto& v = g.values[n.outputs[i]];
      v.dtype = outs[i].dtype();
      const bool container = dtype_is_container(v.dtype);
      if (container) v.elem_type = outs[i].list().elem_type;
      v.has_shape = !container;
      v.shape = container ? SymShape{} : sym_shape_from(outs[i].shape());
      v.constant = outs[i];
    }
    return true;
  }
  std::vector<Tensor> outs;
  for (int o : n.outputs) {
    if (o < 0) {
      outs.emplace_back();
      kc.outputs.push_back(TensorView{});
      continue;
    }
    const auto& v = g.values[o];
    outs.push_back(Tensor::empty(v.dtype, sym_shape_values(v.shape)));
    kc.outputs.push_back(outs.back().view());
  }
  std::vector<char> scratch(kernel->scratch_bytes() + 64);
  kc.scratch = scratch.data();
  kc.num_threads = std::max(1, ctx.num_threads);
  kernel->run(kc);
  for (size_t i = 0; i < n.outputs.size(); ++i)
    if (n.outputs[i] >= 0) g.values[n.outputs[i]].constant = outs[i];
  return true;
}

int infer_and_fold(graph::Graph& g, const PassContext& ctx, bool fold) {
  int folded = 0;
  std::vector<char> dead(g.nodes.size(), 0);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const graph::Node& n = g.nodes[i];
    const OpSchema* schema = find_schema(n.domain, n.op_type);
    if (!schema)
      throw Error(ErrorKind::kUnsupportedOp, "no shape rule for op '" + n.op_type + "'", n.name, n.op_type);
    InferContext ic(g, n, ctx.opset);
    ic.set_evaluating(ctx.evaluate_all);
    schema->infer(ic);
    if (is_unfoldable(n) && !ctx.evaluate_all) continue;
    if (!all_inputs_constant(g, n)) {
      // Shape arithmetic on dims known in part (graph/passes/partial_values.h).
      if (propagate_partial(g, n, ctx, fold)) {
        dead[i] = 1;
        ++folded;
      }
      continue;
    }
    if (!fold) continue;
    bool small = false;
    const size_t limit = ctx.evaluate_all ? SIZE_MAX : ctx.fold_limit_bytes;
    const bool known = outputs_fully_known(g, n, limit, &small);
    if (known && !small) continue;
    if (!known && !ctx.evaluate_all) continue;
    if (fold_node(g, n, ctx, !known)) {
      dead[i] = 1;
      ++folded;
    }
  }
  if (folded) {
    std::vector<graph::Node> kept;
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (!dead[i]) kept.push_back(std::move(g.nodes[i]));
    g.nodes = std::move(kept);
    g.topo_sort();
  }
  return folded;
}

}  // namespace twinfer::passes
