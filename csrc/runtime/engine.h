// Engine: an optimised graph plus compiled plans, one per concrete input
// shape signature. Immutable from the outside and safe to share between
// threads: the plan cache is guarded by a mutex, plans build outside it (one
// build per plan, whoever needs it waits for it), and runs are not serialised.
#pragma once
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "core/device.h"
#include "graph/ir.h"
#include "graph/passes/fixed_dims.h"
#include "runtime/constant_store.h"
#include "runtime/engine_file.h"
#include "runtime/engine_options.h"
#include "runtime/execution_context.h"
#include "runtime/eval_kernels.h"
#include "runtime/kernel_cache.h"
#include "runtime/plan.h"
#include "runtime/plan_ahead.h"

namespace twinfer {

struct HostHead;  // runtime/host_head.h

struct IOSpec {
  std::string name;
  DType dtype;
  SymShape shape;
  bool has_shape = true;  // false: declared without a shape, any rank (`shape` is then empty)
};

struct EngineStats {
  size_t nodes_in_model = 0;
  size_t nodes_optimized = 0;      // after load-time passes (symbolic shapes)
  size_t plans_cached = 0;
  size_t plan_hits = 0;
  size_t plan_misses = 0;
  std::vector<std::string> pass_log;
  std::vector<std::string> shape_inputs;     // inputs whose values key plans (Engine::shape_inputs)
  std::vector<std::string> steering_inputs;  // flags Ifs branch on, keyed while few-valued
  bool steering_active = true;               // false: they took too many values, no longer keyed
  size_t steered_graphs = 0;                 // graphs built for steering values (one each)
  size_t fixed_dims_graphs = 0;              // graphs with the dims that stay bound (passes/fixed_dims.h)
  size_t kernels_built = 0, kernels_reused = 0;  // by plans (runtime/kernel_cache.h)
  // By the host evaluator (runtime/eval_kernels.h): built, taken from an
  // earlier run, and held now.
  size_t eval_kernels_built = 0, eval_kernels_reused = 0, eval_kernels_held = 0;
  // A CPU graph taking strings (runtime/host_head.h): the nodes evaluated on
  // every run, the rest's nodes, and the kernels the rest's plans built.
  size_t host_head_nodes = 0, host_head_rest_nodes = 0, host_head_rest_kernels_built = 0;
  size_t kernels_any_size = 0;  // of those built, kernels for any matrix sizes (KernelDef::create_any_size)
  size_t plans_ahead = 0;       // plans built ahead of a run (runtime/plan_ahead.h)
  size_t plans_ahead_used = 0;  // of those, the ones a run then used
  size_t plans_building = 0;    // plans being built now, or posted to be built ahead
};

// Memory of one plan: what the arenas hold at peak vs. what all
// intermediates would take without reuse, plus weights. Device plans have a
// host arena (page-locked: host values and staging) and a device arena.
struct MemoryReport {
  size_t arena_bytes = 0;  // host
  size_t naive_bytes = 0;
  size_t constant_bytes = 0;         // weights the plan reads on the host
  size_t device_arena_bytes = 0;
  size_t device_naive_bytes = 0;
  size_t device_constant_bytes = 0;  // weights the plan reads on the device (uploaded once per engine)
  size_t engine_device_constant_bytes = 0;  // every plan's uploads so far, shared ones once
  size_t num_steps = 0;
  size_t host_steps = 0, copy_steps = 0;
  size_t in_place_steps = 0;  // outputs written over an input's block
};

// One step of a plan, for kernel_report: node, op, kernel, where it runs
// ("cpu", "cuda", "sim", or "copy"), why a node of a device plan runs on
// the host ("" otherwise), and the type of its first output (what a
// precision="fp16" plan computes where).
struct KernelReportRow {
  std::string node, op, kernel, where, note, dtype;
};

class Engine {
 public:
  static std::shared_ptr<Engine> create(graph::Model model, const EngineOptions& options);
  // An engine from a saved engine file (runtime/engine_file.h): its graph is
  // already optimised, so no load-time pass runs; precision comes from the
  // file, device and threads from `options`.
  static std::shared_ptr<Engine> create_saved(graph::Model model, const SavedEngineInfo& info,
                                              const EngineOptions& options);
  // An engine for `g`, a part of `parent`'s optimised graph (a staged tail's
  // rest, runtime/staged_tail.h): the parent's options and opsets, no
  // load-time pass; plans built per input shape as any engine's.
  static std::shared_ptr<Engine> create_stage(graph::Graph g, const Engine& parent);
  // Writes the optimised graph to `path` with the caller's `metadata`.
  void save(const std::string& path, const std::map<std::string, std::string>& metadata) const;

  const std::vector<IOSpec>& inputs() const { return inputs_; }
  const std::vector<IOSpec>& outputs() const { return outputs_; }
  // Initializers the model also lists as inputs that were made inputs
  // (EngineOptions::override_initializers): the values a run that does not
  // feed them uses (the Python layer fills them in), in inputs() order.
  const std::vector<std::pair<std::string, Tensor>>& input_defaults() const { return input_defaults_; }
  // Those left folded as constants: feeding one is an error that says how.
  const std::vector<IOSpec>& folded_overridable() const { return folded_overridable_; }
  const EngineOptions& options() const { return options_; }
  Device device() const { return options_.device; }
  Precision precision() const { return options_.precision; }
  const graph::Graph& optimized_graph() const { return graph_; }
  EngineStats stats() const;

  // The plan for these input shapes, built on first use and cached.
  std::shared_ptr<const Plan> plan_for(const std::vector<Shape>& input_shapes, bool may_build = true) const;
  // Inputs whose values decide shapes (graph/passes/shape_inputs.h), as
  // indices into inputs(): where a plan at some shapes needs them, plans are
  // keyed by their values too.
  const std::vector<int>& shape_inputs() const { return shape_inputs_; }
  // Shape and steering inputs together (ascending): the inputs whose values
  // may key a plan.
  const std::vector<int>& value_keyed_inputs() const { return value_keyed_; }
  MemoryReport memory_report(const std::vector<Shape>& input_shapes) const;
  std::vector<KernelReportRow> kernel_report(const std::vector<Shape>& input_shapes) const;
  // The plan a run with these inputs uses (shape and steering inputs' values
  // included).
  std::vector<KernelReportRow> kernel_report(const std::vector<Tensor>& inputs) const;

  // Validate the inputs (count, dtype, rank, dims, device) and run in `ctx`.
  // A device engine takes inputs on its device or on the host.
  std::vector<Tensor> run(ExecutionContext& ctx, const std::vector<Tensor>& inputs,
                          const RunOptions& options = {}) const;
  // Same, with a context borrowed from the engine's pool (one per concurrent caller).
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, const RunOptions& options = {}) const;
  // Evaluates the graph node by node with the input values known (plans
  // whose shapes depend on values), on the host.
  std::vector<Tensor> run_eager(const std::vector<Tensor>& inputs, int threads) const;
  // A new context for this engine (device, threads, stream priority;
  // kEnginePriority: the engine's stream_priority option).
  static constexpr int kEnginePriority = INT32_MIN;
  // sm_share > 0: the context's stream runs on that share of the GPU's SMs.
  std::unique_ptr<ExecutionContext> create_context(int num_threads = 0, int stream_priority = kEnginePriority,
                                                   double sm_share = 0) const;
  // A device engine whose plans need the host evaluator (shapes that depend
  // on values, sequences): why, once such a run happened ("" otherwise).
  std::string host_fallback_reason() const;

  int default_threads() const;

  // Until no plan is being built ahead (runtime/plan_ahead.h): tests.
  void wait_plans_ahead() const { plan_ahead_.wait_idle(); }

 private:
  Engine() = default;
  // Throws for inputs that cannot run (count, device, dtype, rank, a fixed
  // dim); returns the first pair of inputs that disagree on a dim the model
  // names alike ("" if none), which a run tolerates.
  std::string check_inputs(const std::vector<Tensor>& inputs) const;
  // Throws kShape when `s` has another rank than `spec` or differs in a fixed dim.
  static void check_input_shape(const IOSpec& spec, const Shape& s);
  std::vector<Tensor> run_checked(ExecutionContext& ctx, const std::vector<Tensor>& inputs,
                                  const RunOptions& options) const;  // run, after check_inputs
  std::vector<KernelReportRow> report_rows(const Plan& plan) const;
  std::shared_ptr<const Plan> plan_for_inputs(const std::vector<Tensor>& inputs, const RunOptions& o) const;  // no copies on a hit
  // The cached plan for these shapes and the values (host tensors) of the
  // inputs `keyed` (indices, ascending; empty: shapes alone), else a new one.
  // `may_build` false: a run being captured into a graph, whose thread may
  // neither allocate nor synchronise; a miss is its error (it may still wait
  // for a plan another thread is building).
  std::shared_ptr<const Plan> plan_for(const std::vector<Shape>& shapes, const std::vector<int>& keyed,
                                       const std::vector<Tensor>& values, bool may_build = true) const;
  // Under plans_mutex_: a run used the plan of `key` for the first time (a
  // new plan, or one built ahead); when its shapes continue a progression,
  // the plan for the next ones is built ahead.
  void first_use(const std::vector<Shape>& shapes, const std::vector<int>& keyed, const std::vector<Tensor>& values,
                 const Plan& plan) const;
  void guess_next(const std::vector<Shape>& shapes, const std::vector<int>& keyed, const std::vector<Tensor>& values,
                  const Plan& plan) const;  // first_use's work; may throw
  // The values of the inputs `of` (a subset of `keyed`), in of's order.
  static std::vector<Tensor> values_of(const std::vector<int>& of, const std::vector<int>& keyed,
                                       const std::vector<Tensor>& values);
  // The engine's graph with the steering inputs at these values (in
  // steering_inputs_ order) as constants, the Ifs they decide inlined and
  // rewritten (passes::run_steered_passes): built once per value, shared by
  // the plans of every shape.
  std::shared_ptr<const graph::Graph> steered_graph(const std::vector<Tensor>& values) const;
  // What a new plan for `shapes` starts from: `base` (the engine's graph or
  // a steered one) with the input dims that have not changed since its last
  // new plan bound and folded (passes::bind_fixed_dims), once some have
  // changed; `base` itself before that, without optimize, for shapes that do
  // not fit the inputs, or if binding fails. Under sources_mutex_. Held by
  // the pointer: a bound graph may leave its list while a plan builds from it.
  std::shared_ptr<const graph::Graph> plan_source_graph(const std::shared_ptr<const graph::Graph>& base,
                                                        const std::vector<Shape>& shapes) const;
  void finish(graph::Graph optimized);  // inputs/outputs, and the plan when every input dim is static
  std::vector<Tensor> run_on_host(const std::vector<Tensor>& inputs, int threads, const RunOptions& o) const;
  // A split value-dependent plan: its prefix as a plan, then its tail on the host.
  std::vector<Tensor> run_split(ExecutionContext& ctx, const Plan& plan, const std::vector<Tensor>& inputs,
                                const RunOptions& o) const;
  // `g` (the engine's graph or a part of it) evaluated on the host, the
  // evaluator's kernels kept across runs (runtime/eval_kernels.h).
  std::vector<Tensor> evaluate_on_host(const graph::Graph& g, const std::vector<Tensor>& inputs, int threads) const;
  // A CPU graph that takes strings: its head evaluated, then the rest's
  // engine (runtime/host_head.h); host_head() splits the graph once.
  const HostHead* host_head() const;
  std::vector<Tensor> run_host_head(ExecutionContext& ctx, const HostHead& h, const std::vector<Tensor>& inputs,
                                    const RunOptions& o) const;
  // A staged one: its prefix (if any), the tail's first nodes alone, then
  // the rest's engine, all on the device.
  std::vector<Tensor> run_staged(ExecutionContext& ctx, const Plan& plan, const std::vector<Tensor>& inputs,
                                 const RunOptions& o) const;
  void prepare_device();                            // device engines: check the device, the constant store
  Backend passes_backend() const;                   // the backend load-time fusions target
  passes::PassContext pass_context() const;         // for the engine's graph passes (load, bound, steered)
  void check_fallback(const graph::Graph& g) const;  // allow_cpu_fallback=False: every node has a device kernel
  void find_value_inputs(const graph::Graph& g);     // shape_inputs_, steering_inputs_, value_keyed_ (before check_fallback)
  void make_overrides(graph::Model& model);          // override_initializers -> inputs with defaults

  EngineOptions options_;
  int64_t opset_ = 0;
  std::map<std::string, int64_t> opsets_;  // every domain's opset (saved with the engine)
  std::shared_ptr<void> backing_;  // keeps the file bytes that weights borrow alive
  graph::Graph graph_;             // optimised, shapes symbolic
  std::vector<IOSpec> inputs_, outputs_;
  std::vector<std::pair<std::string, Tensor>> input_defaults_;
  std::vector<IOSpec> folded_overridable_;
  std::vector<std::string> pass_log_;
  size_t nodes_in_model_ = 0;
  std::unique_ptr<ConstantStore> constants_;  // device engines: weights uploaded once, shared by all plans
  mutable std::mutex fallback_mutex_;
  mutable std::string host_fallback_;

  std::vector<int> shape_inputs_;     // ascending
  std::vector<int> steering_inputs_;  // ascending
  std::vector<int> value_keyed_;      // both, ascending: what steering plans are keyed by
  // Distinct value tuples seen, up to a limit: a run with a new one past it
  // is not specialised (a counter would build a plan per run).
  struct SeenValues {
    std::vector<std::pair<std::vector<int>, std::vector<Tensor>>> seen;
    // False when (keyed, values) is new and `limit` tuples are already seen.
    bool note(const std::vector<int>& keyed, const std::vector<Tensor>& values, size_t limit);
  };
  mutable std::atomic<bool> steering_active_{true};
  mutable SeenValues steering_seen_;  // under plans_mutex_; at most kMaxSteeringValues
  mutable std::mutex steered_mutex_;  // taken alone or under plans_mutex_, never the other way
  mutable std::vector<std::pair<std::vector<Tensor>, std::shared_ptr<const graph::Graph>>> steered_graphs_;

  // What a plan was built for: input shapes, and the shape inputs' values
  // where the shapes alone did not size every value (empty otherwise).
  struct PlanKey {
    std::vector<Shape> shapes;
    std::vector<int> keyed;      // the inputs whose values key the plan (ascending)
    std::vector<Tensor> values;  // owned host copies, one per keyed input
    bool ahead = false;          // built ahead of a run and not used yet
  };
  // A cache hit (under plans_mutex_): counted; a run's first use of a plan
  // built ahead continues its progression (first_use).
  std::shared_ptr<const Plan> count_hit(PlanKey& key, std::shared_ptr<const Plan> plan) const;
  // What a new plan needs (taken under plans_mutex_, built without it): its
  // key, with owned copies of the values; the values by input index.
  struct NewPlan {
    PlanKey key;
    std::vector<Tensor> by_input;
  };
  NewPlan new_plan(const std::vector<Shape>& shapes, const std::vector<int>& keyed,
                   const std::vector<Tensor>& values) const;
  // The graph a plan for `key` starts from: the engine's, the one its
  // steering values steer, or either bound to the dims that stay fixed
  // (plan_source_graph, under sources_mutex_). Outside plans_mutex_.
  std::shared_ptr<const graph::Graph> source_of(const PlanKey& key) const;
  std::shared_ptr<const Plan> build(const NewPlan& np) const;
  void cache(PlanKey key, std::shared_ptr<const Plan> plan) const;  // under plans_mutex_; drops the oldest past the limit
  void built(const PlanKey& key) const;                            // under plans_mutex_: no longer in building_
  bool cached(const PlanKey& key) const;                           // under plans_mutex_; not a use
  void build_ahead(const PlanKey& key) const;                      // on the plan-ahead thread
  // The new shapes runs used lately (oldest first, at most 3), while the
  // keyed inputs and their values stay the same.
  struct ShapeRun {
    std::vector<int> keyed;
    std::vector<Tensor> values;
    std::vector<std::vector<Shape>> recent;
  };
  // Per base graph (by address: the engine's graph and its steered graphs
  // live as long as the engine): the input shapes of its last new plan and
  // every dim that has changed between its new plans.
  struct DimsHistory {
    const graph::Graph* base;
    std::vector<Shape> last;
    passes::DimMask varying;
  };
  struct FixedDimsGraph {
    const graph::Graph* base;
    std::vector<Shape> masked;  // the input shapes it binds, varying dims -1
    std::shared_ptr<const graph::Graph> graph;  // null: binding threw, plans start from the base
  };
  static constexpr size_t kMaxFixedDimsGraphs = 4;
  // The three under sources_mutex_ (taken alone or under plans_mutex_,
  // never the other way): a plan's source is chosen while it builds.
  mutable std::mutex sources_mutex_;
  mutable std::vector<DimsHistory> dims_history_;
  mutable std::list<FixedDimsGraph> fixed_dims_graphs_;     // MRU first
  mutable size_t fixed_dims_built_ = 0;
  mutable KernelCache kernels_;  // shared by the plans (a plan for new shapes reuses what it can)
  // The host evaluator's kernels, kept across its runs (value-dependent
  // tails: runtime/eval_kernels.h).
  mutable EvalKernels eval_kernels_;
  mutable std::once_flag host_head_once_;
  mutable std::shared_ptr<const HostHead> host_head_;  // null: no such split
  KernelReuse* eval_kernel_reuse() const;  // &eval_kernels_, or null with TWINFER_EVAL_KERNEL_REUSE=0
  mutable std::mutex plans_mutex_;
  mutable std::list<std::pair<PlanKey, std::shared_ptr<const Plan>>> plans_;  // MRU first
  mutable size_t plan_hits_ = 0, plan_misses_ = 0;
  mutable ShapeRun shape_run_;  // under plans_mutex_
  mutable size_t plans_ahead_ = 0, plans_ahead_used_ = 0;
  // Keys whose plans are being built (outside plans_mutex_: runs at cached
  // shapes go on meanwhile), or posted to be built ahead: a run that needs
  // one waits for it instead of building it again.
  mutable std::vector<PlanKey> building_;  // under plans_mutex_
  mutable std::condition_variable plan_built_;
  // Distinct keyed values a CPU engine has planned for; past
  // max_cached_plans of them, new ones run through the host evaluator.
  mutable SeenValues shape_values_seen_;  // under plans_mutex_

  mutable std::mutex pool_mutex_;
  mutable std::vector<std::unique_ptr<ExecutionContext>> pool_;
  // Contexts whose run a caller captured into its own graph (torch.cuda.graph
  // around a pooled run): that graph reads and writes their buffers on every
  // replay, so they never go back to the pool; they live as long as the engine.
  mutable std::vector<std::unique_ptr<ExecutionContext>> captured_;

  // Last, so it is destroyed first: its thread builds with the members above.
  mutable PlanAheadWorker plan_ahead_;
};

}  // namespace twinfer
