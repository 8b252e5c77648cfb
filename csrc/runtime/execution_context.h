// Everything that changes per run: the arena for intermediates, the per-step
// argument blocks, the thread budget (and, on CUDA, the stream and handles).
// One context runs one thing at a time; use one per thread.
#pragma once
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "runtime/kernel.h"
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

 private:
  void prepare(const std::shared_ptr<const Plan>& plan);  // arena and argument blocks for this plan

  Device device_;
  int num_threads_;
  std::shared_ptr<Storage> arena_;
  std::shared_ptr<const Plan> prepared_for_;  // held, so its address cannot be reused under us
  std::vector<KernelContext> step_args_;
  std::vector<void*> value_ptrs_;
};

}  // namespace twinfer
