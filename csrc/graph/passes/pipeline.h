// The order the passes run in, in one place (docs/architecture.md draws it).
//
//   run_load_passes: once per engine, on the model's graph with symbolic
//     shapes (folding, fusion, int8 rewrites).
//   run_steered_passes: once per steering value (shape_inputs.h), on a copy
//     of the engine's graph whose steering inputs are constants: the Ifs they
//     decide become their branches, which the rewrites that are safe to run
//     again then see (the load's ran before the branches were in the graph).
//   bind_fixed_dims (fixed_dims.h, from the engine): once per class of shapes
//     that change in a few dims, on a copy of that graph with the other dims
//     bound: folding only.
//   run_plan_passes: once per plan, on a copy of that graph (or of the bound
//     one) whose inputs have concrete shapes (folding again, compacting, then
//     fusion and the blocked layout that only concrete shapes allow).
//   run_channels_last: device plans, once their precision is lowered.
//   run_fuse_residual: device plans, after that.
//   run_fuse_elementwise: device plans, after that, before placement.
//   run_attention_views: device plans, after that.
//
// Both take the PassContext the caller set up (opset, backend, precision,
// the pass log) and change nothing else.
#pragma once
#include <functional>

#include "graph/ir.h"
#include "graph/passes/attention_views.h"
#include "graph/passes/blocked_layout.h"
#include "graph/passes/channels_last.h"
#include "graph/passes/fuse_elementwise.h"
#include "graph/passes/fuse_residual.h"
#include "graph/passes/insert_qdq.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {

struct LoadPassOptions {
  bool optimize = true;       // folding, fusion; off: shape inference only
  QuantizeSpec int8;          // pc.precision == kINT8: the calibrated ranges insert_qdq uses
  bool int8_weights = false;  // weights="int8": MatMul/Gemm weights stored as int8 rows
};

void run_load_passes(graph::Graph& g, const LoadPassOptions& options, PassContext& pc);

// Returns how many Ifs became their branches.
int run_steered_passes(graph::Graph& g, bool optimize, PassContext& pc);

struct PlanPassOptions {
  bool optimize = true;
  // The CPU's channel-blocked activations (plans that run on the CPU backend
  // only: a device plan's kernels take plain layouts).
  bool blocked_layout = true;
  // Sets the graph back to what run_plan_passes was given. With it, the
  // rewrites keep no copy of the graph to undo themselves with (a plan for
  // each new shape paid for one per rewrite, found something or not): one
  // that fails to type-check has the graph rebuilt, and the passes run
  // again without it.
  std::function<void(graph::Graph&)> rebuild;
};

struct PlanPassResult {
  // A node with an output whose shape is still unknown once the input shapes
  // are (it needs input values: the plan is evaluated eagerly), or -1; the
  // later passes do not run then.
  int unknown_node = -1;
  int unknown_value = -1;
  BlockedLayout blocked;  // values stored channel-blocked (block 0: none)
};

PlanPassResult run_plan_passes(graph::Graph& g, const PlanPassOptions& options, PassContext& pc);

// Device plans, after lower_precision (the dtypes say which convolutions
// have tensor-core kernels) and before placement: convolution regions
// channels-last (channels_last.h), kept only if the graph still type-checks.
int run_channels_last(graph::Graph& g, const ChannelsLastOptions& options, PassContext& pc);

// Device plans, after run_channels_last and before run_fuse_elementwise (the
// GEMM takes its residual Add before a chain could): MatMul + Add(residual)
// as one com.twinfer::MatMul (fuse_residual.h).
int run_fuse_residual(graph::Graph& g, const FuseResidualOptions& options, PassContext& pc);

// Device plans, after run_channels_last (its transposes end chains; its
// NHWC shapes are the ones the fused kernels see) and before placement:
// elementwise chains as one op (fuse_elementwise.h), kept only if the graph
// still type-checks.
int run_fuse_elementwise(graph::Graph& g, const FuseElementwiseOptions& options, PassContext& pc);

// Device plans, after run_fuse_elementwise: fused attention reads its
// operands and writes its output in place of the copies around it.
int run_attention_views(graph::Graph& g, const AttentionViewsOptions& options, PassContext& pc);

}  // namespace twinfer::passes
