// Kernels shared by the plans of one engine. A plan for new input shapes
// (an autoregressive decoder's next step, whose past grew by one) builds a
// kernel per node, and most of its nodes see what they saw in the last plan:
// the same op, attributes, weights and input shapes (the new token's
// projections). Kernels are immutable, so one such kernel serves any number
// of plans and contexts; building it again (oneDNN primitives, packed
// weights, cuBLASLt algorithms) is most of what a new plan costs.
//
// The key is everything a kernel is built from (ops/kernel.h's
// KernelBuildInfo): the kernel definition chosen, the backend, precision and
// opset, the node's op, name and attributes, and every input's and output's
// dtype and shape; a constant input by its bytes when small, else by the
// address of its storage, which the kernel keeps alive (a kernel may hold
// pointers into it). Nodes with subgraphs are never shared. Held weakly: a
// kernel lives as long as a plan that uses it.
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "ops/kernel.h"

namespace twinfer {

class KernelCache {
 public:
  // The kernel `def` builds for `info`, from an earlier plan where one is
  // still alive, else built now (and remembered).
  std::shared_ptr<const Kernel> get(const KernelDef& def, const KernelBuildInfo& info);

  struct Stats {
    size_t hits = 0, misses = 0;
  };
  Stats stats() const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::weak_ptr<const Kernel>> kernels_;
  size_t inserts_since_sweep_ = 0;
  Stats stats_;
};

// The key above, or "" for a node that must not be shared (subgraphs).
std::string kernel_key(const KernelDef& def, const KernelBuildInfo& info);

}  // namespace twinfer
