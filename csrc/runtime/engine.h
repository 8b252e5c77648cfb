// Engine: an optimised graph plus compiled plans, one per concrete input
// shape signature. Immutable from the outside and safe to share between
// threads: plan building is serialised by a mutex, running is not.
#pragma once
#include <array>
#include <atomic>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "core/device.h"
#include "graph/ir.h"
#include "runtime/engine_file.h"
#include "runtime/plan.h"

namespace twinfer {

class ExecutionContext;

struct EngineOptions {
  Device device = Device::cpu();
  Precision precision = Precision::kFP32;
  int num_threads = 0;            // CPU threads per run; 0 = all the process may use
  bool optimize = true;           // run the rewrite passes (folding, fusion)
  size_t max_cached_plans = 16;   // per-shape plans kept (least recently used dropped)
  // Intermediate values to return as extra outputs, after the model's own
  // (calibration and per-layer accuracy reports read activations this way).
  std::vector<std::string> extra_outputs;
  // precision int8: calibrated activation ranges (value name -> amax), and
  // nodes to keep in float (the accuracy fallback). Activations in
  // int8_unsigned were never negative in calibration: they run as uint8.
  std::map<std::string, float> int8_amax;
  std::set<std::string> int8_unsigned;
  // Per-channel activation means for bias correction (QuantizeSpec).
  std::map<std::string, std::vector<float>> int8_channel_mean;
  std::set<std::string> keep_float;
  // weights="int8": MatMul/Gemm constant weights stored int8 per output
  // channel and dequantized inside the GEMM (activations stay float32).
  bool int8_weights = false;
};

struct IOSpec {
  std::string name;
  DType dtype;
  SymShape shape;
};

struct EngineStats {
  size_t nodes_in_model = 0;
  size_t nodes_optimized = 0;      // after load-time passes (symbolic shapes)
  size_t plans_cached = 0;
  size_t plan_hits = 0;
  size_t plan_misses = 0;
  std::vector<std::string> pass_log;
};

// Memory of one plan: what the arena holds at peak vs. what all
// intermediates would take without reuse, plus weights.
struct MemoryReport {
  size_t arena_bytes = 0;
  size_t naive_bytes = 0;
  size_t constant_bytes = 0;
  size_t num_steps = 0;
};

class Engine {
 public:
  static std::shared_ptr<Engine> create(graph::Model model, const EngineOptions& options);
  // An engine from a saved engine file (runtime/engine_file.h): its graph is
  // already optimised, so no load-time pass runs; precision comes from the
  // file, device and threads from `options`.
  static std::shared_ptr<Engine> create_saved(graph::Model model, const SavedEngineInfo& info,
                                              const EngineOptions& options);
  // Writes the optimised graph to `path` with the caller's `metadata`.
  void save(const std::string& path, const std::map<std::string, std::string>& metadata) const;

  const std::vector<IOSpec>& inputs() const { return inputs_; }
  const std::vector<IOSpec>& outputs() const { return outputs_; }
  const EngineOptions& options() const { return options_; }
  Device device() const { return options_.device; }
  Precision precision() const { return options_.precision; }
  const graph::Graph& optimized_graph() const { return graph_; }
  EngineStats stats() const;

  // The plan for these input shapes, built on first use and cached.
  std::shared_ptr<const Plan> plan_for(const std::vector<Shape>& input_shapes) const;
  MemoryReport memory_report(const std::vector<Shape>& input_shapes) const;
  // Per step: node name, op, kernel implementation (for reports).
  std::vector<std::array<std::string, 3>> kernel_report(const std::vector<Shape>& input_shapes) const;

  // Validate the inputs (count, dtype, rank, dims, device) and run in `ctx`.
  std::vector<Tensor> run(ExecutionContext& ctx, const std::vector<Tensor>& inputs) const;
  // Same, with a context borrowed from the engine's pool (one per concurrent caller).
  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const;
  // Evaluates the graph node by node with the input values known (plans
  // whose shapes depend on values).
  std::vector<Tensor> run_eager(const std::vector<Tensor>& inputs, int threads) const;

  int default_threads() const;

 private:
  Engine() = default;
  void check_inputs(const std::vector<Tensor>& inputs) const;
  void finish(graph::Graph optimized);  // inputs/outputs, and the plan when every input dim is static
  std::unique_ptr<Plan> build_plan(const std::vector<Shape>& shapes) const;

  EngineOptions options_;
  int64_t opset_ = 0;
  std::map<std::string, int64_t> opsets_;  // every domain's opset (saved with the engine)
  std::shared_ptr<void> backing_;  // keeps mapped weights alive
  graph::Graph graph_;             // optimised, shapes symbolic
  std::vector<IOSpec> inputs_, outputs_;
  std::vector<std::string> pass_log_;
  size_t nodes_in_model_ = 0;

  mutable std::mutex plans_mutex_;
  mutable std::list<std::pair<std::vector<Shape>, std::shared_ptr<const Plan>>> plans_;  // MRU first
  mutable size_t plan_hits_ = 0, plan_misses_ = 0;

  mutable std::mutex pool_mutex_;
  mutable std::vector<std::unique_ptr<ExecutionContext>> pool_;
};

}  // namespace twinfer
