// An execution plan for one set of concrete input shapes: the specialised
// graph, a kernel per node, and where every value lives. Immutable once built;
// shared by every execution context that runs this shape.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/device_api.h"
#include "graph/ir.h"
#include "ops/kernel.h"
#include "runtime/placement.h"
#include "runtime/staged_tail.h"

namespace twinfer {

enum class ValueHome : uint8_t {
  kArena,     // intermediate: offset into the context's arena
  kConstant,  // weights / folded constants: fixed pointer
  kInput,     // the caller's buffer
  kOutput,    // a fresh tensor handed back to the caller
  kUnused,    // nothing reads or writes it in this plan
};

struct PlannedValue {
  ValueHome home = ValueHome::kUnused;
  DType dtype = DType::kUndefined;
  Shape shape;         // logical, whatever the layout
  size_t offset = 0;   // kArena
  Tensor constant;     // kConstant
  int io_index = -1;   // kInput / kOutput: position in the engine's inputs / outputs
  // > 0: stored in the CPU's channel-blocked layout (graph/passes/blocked_layout.h),
  // channels padded up to a multiple of this block. Only ever kArena.
  int64_t channel_block = 0;
  // Device plans: where the value lives (kArena: which of the two arenas;
  // kConstant: the device copy from the engine's constant store, or the host
  // tensor). Host plans: always kHost.
  MemorySpace space = MemorySpace::kHost;
};

// Bytes a value occupies: its logical size, or with the channel padding of
// the blocked layout.
inline size_t planned_bytes(const PlannedValue& v) {
  size_t n = static_cast<size_t>(shape_numel(v.shape));
  if (v.channel_block > 0 && v.shape.size() >= 2 && v.shape[1] > 0) {
    const int64_t c = v.shape[1], padded = (c + v.channel_block - 1) / v.channel_block * v.channel_block;
    n = n / static_cast<size_t>(c) * static_cast<size_t>(padded);
  }
  return n * dtype_size(v.dtype);
}

struct PlannedStep {
  const graph::Node* node = nullptr;  // points into Plan::graph
  StepKind kind = StepKind::kHost;    // device plans: where and how it runs
  std::string note;                   // why a node of a device plan runs on the host
  std::shared_ptr<const Kernel> kernel;  // none for copies; may be shared with other plans (runtime/kernel_cache.h)
  std::vector<int> inputs;   // value ids, -1 for a missing optional
  std::vector<int> outputs;
  size_t scratch_offset = 0;
};

struct Plan {
  graph::Graph graph;                // specialised for these shapes
  Device device;                     // cpu: every step runs on the host; else a device plan
  std::vector<PlannedValue> values;  // by value id of `graph`
  std::vector<PlannedStep> steps;
  size_t arena_bytes = 0;            // peak memory for intermediates (+ scratch); device plans: the host arena
  size_t naive_bytes = 0;            // what they would need without reuse

  // Device plans. The device arena holds the device values, and for the
  // whole run one buffer per input and per output (input_slots /
  // output_slots): host inputs are staged into them, and a captured graph
  // reads and writes only those, so a replay never sees another run's
  // addresses. The host arena (page-locked) holds host values and the
  // staging buffers host inputs and outputs pass through.
  size_t device_arena_bytes = 0;
  size_t device_naive_bytes = 0;
  std::vector<size_t> input_slots, output_slots;      // device arena offsets
  std::vector<size_t> input_staging, output_staging;  // host arena offsets
  // Per input: no step reads it, so a run neither copies nor checks it (a
  // shape or steering value that picked this plan and is held as one of its
  // constants, or an input only the branch not taken read).
  std::vector<char> input_unread;
  bool capturable = false;  // no host step: one CUDA graph can hold the whole run
  size_t host_steps = 0, copy_steps = 0;
  size_t in_place_steps = 0;  // steps whose output 0 took an input's block (Kernel::output_may_take_input)
  std::vector<Shape> output_shapes;  // per engine output
  std::vector<DType> output_dtypes;
  // Some shape depends on input values (a shape fed as an input, NonZero...):
  // no steps; every run evaluates the graph eagerly with the inputs' values.
  bool value_dependent = false;
  std::string value_dependent_reason;  // the first node whose shape needed values
  // A value-dependent plan split where values start deciding shapes
  // (runtime/plan_split.h): the nodes before as a plan of their own, the
  // rest evaluated on the host from the engine inputs it reads
  // (tail_engine_inputs, by index) and the prefix's outputs. Null: none
  // (nothing before the first such node), the whole graph is evaluated.
  std::shared_ptr<const Plan> prefix;
  graph::Graph tail;
  std::vector<int> tail_engine_inputs;
  // On a device, a tail that starts with nodes whose device kernels size
  // their own outputs (NonMaxSuppression) runs there stage by stage instead
  // of on the host (runtime/staged_tail.h); `tail` is then the whole graph
  // when there is no prefix.
  std::shared_ptr<const StagedTail> staged;
  std::string not_staged_why;  // on a device, why the tail is the host evaluator's
};

}  // namespace twinfer
