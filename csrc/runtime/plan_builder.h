// Building a plan for one set of input shapes: specialise the engine's graph
// (plan-time passes), place its nodes (device engines: runtime/placement.h),
// build a kernel per node, and lay out memory — one arena per memory space,
// by liveness (runtime/arena_planner.h).
#pragma once
#include <memory>
#include <vector>

#include "graph/ir.h"
#include "runtime/constant_store.h"
#include "runtime/engine_options.h"
#include "runtime/kernel_cache.h"
#include "runtime/plan.h"

namespace twinfer {

struct PlanSource {
  const graph::Graph& graph;     // the engine's optimised graph (symbolic shapes)
  int64_t opset = 0;
  const EngineOptions& options;
  ConstantStore* constants = nullptr;  // device engines: where weights are uploaded
  KernelCache* kernels = nullptr;      // kernels other plans of the engine built (none: each built anew)
  // A value-dependent plan gets a planned prefix (runtime/plan_split.h).
  // Off for a plan only asked for to learn that values decide its shapes
  // (an engine with shape inputs keys the plan it runs by their values).
  bool split_value_dependent = true;
};

// `values`: empty, or one per input; a defined one is that input's value
// (a shape input, graph/passes/shape_inputs.h), folded into the plan as a
// constant: the plan then serves only runs with the same value.
std::unique_ptr<Plan> build_plan(const PlanSource& src, const std::vector<Shape>& shapes,
                                 const std::vector<Tensor>& values = {});

}  // namespace twinfer
