// Everything that changes per run: the arena for intermediates, the per-step
// argument blocks, the thread budget (and, on CUDA, the stream and handles).
// One context runs one thing at a time; use one per thread.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ops/kernel.h"
#include "runtime/plan.h"

namespace twinfer {

class ExecutionContext {
 public:
  explicit ExecutionContext(Device device, int num_threads);
  ~ExecutionContext();

  int num_threads() const { return num_threads_; }
  void set_num_threads(int n) { num_threads_ = n > 0 ? n : 1; }
  Device device() const { return device_; }
  size_t arena_bytes() const { return arena_ ? arena_->bytes() : 0; }

  // Run `plan` on `inputs` (already validated); returns the engine's outputs.
  std::vector<Tensor> execute(const std::shared_ptr<const Plan>& plan, const std::vector<Tensor>& inputs);

  // Per-step timing (host clock around each kernel; on the CPU a kernel has
  // finished when run() returns). Off by default: two clock reads per step.
  struct StepTime {
    std::string node, op, impl;
    double total_ms = 0;
    int64_t runs = 0;
  };
  void set_profiling(bool on);
  bool profiling() const { return profiling_; }
  // Times of the plan run last (reset when a run uses another plan).
  std::vector<StepTime> step_times() const;

 private:
  void prepare(const std::shared_ptr<const Plan>& plan);  // arena and argument blocks for this plan

  Device device_;
  int num_threads_;
  std::shared_ptr<Storage> arena_;
  std::shared_ptr<const Plan> prepared_for_;  // held, so its address cannot be reused under us
  std::vector<KernelContext> step_args_;
  std::vector<void*> value_ptrs_;
  bool profiling_ = false;
  std::vector<double> step_ms_;
  std::vector<int64_t> step_runs_;
};

}  // namespace twinfer
