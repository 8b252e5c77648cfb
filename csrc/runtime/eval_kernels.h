// Kernels the eager evaluator keeps from one run to the next (ops/kernel.h's
// KernelReuse). A graph whose shapes depend on values (a detector's tail
// after its NMS) is evaluated node by node on every run, and building each
// node's kernel (oneDNN primitives, packed weights) cost more than running
// it: Faster R-CNN's RoI heads on the CPU ran 1.35x onnxruntime's time.
//
// The evaluator's graph holds every value as a constant. A kernel is built
// instead from a one-node graph in which the run's own values (the graph's
// inputs and what was computed from them) are plain values of their dtype
// and shape, so the kernel reads them when it runs, except small integer
// ones (up to kernel_cache.h's kKeyedByBytes: a computed shape, axes, a K);
// those and the model's weights stay constants, keyed by bytes and by
// storage (kernel_key). A later run whose node sees the same shapes and the
// same small integers takes the same kernel.
//
// Memory: what the last kMaxIdleRuns runs used is kept, no more (a detector
// whose box count changes every image would otherwise keep a kernel, and
// its packed weights, per count), and at most kMaxKernels kernels.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "ops/kernel.h"

namespace twinfer {

class EvalKernels final : public KernelReuse {
 public:
  static constexpr uint64_t kMaxIdleRuns = 4;
  static constexpr size_t kMaxKernels = 4096;

  // A run starts: kernels no run used within the last kMaxIdleRuns go.
  void begin_run() override;

  // Null where the node cannot be shared (subgraphs, shapes unknown until it
  // runs, no kernel for its one-node form) or is not worth it (a kernel
  // cheaper to build than to find: no GEMM, convolution or weight): the
  // evaluator builds its own.
  std::shared_ptr<const Kernel> kernel(const graph::Graph& g, const graph::Node& n, int64_t opset,
                                       const std::vector<char>& per_run) override;

  struct Stats {
    size_t hits = 0, misses = 0, held = 0;
  };
  Stats stats() const;

 private:
  struct Entry {
    std::shared_ptr<const Kernel> kernel;
    uint64_t used = 0;               // the run that last took it
    std::vector<Tensor> constants;   // what the key names by storage, kept alive with it
  };
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> kernels_;
  uint64_t run_ = 0;
  Stats stats_;
};

// False with TWINFER_EVAL_KERNEL_REUSE=0 (read once): every evaluation then
// builds its kernels afresh, for side-by-side measurements.
bool eval_kernel_reuse_wanted();

}  // namespace twinfer
