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
//
// Most of what still changes from one decoding step to the next are the
// attention's products, whose sizes follow the past. A definition with a
// kernel for any matrix sizes (KernelDef::create_any_size: oneDNN's matmul
// with runtime dims) has it built once a node comes at a second size; the
// plans of every later size share it (measured on a 6-layer Llama decoder,
// docs/performance.md).
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
    size_t any_size_built = 0, any_size_hits = 0;  // kernels for any matrix sizes (KernelDef::create_any_size)
  };
  Stats stats() const;

 private:
  // A node (its key without the last two dims' sizes) whose definition has
  // a kernel for any sizes: the first size's key, whether a second size has
  // been seen (then the next build is that kernel), whether the definition
  // declined it, and the kernel once built.
  struct AnySize {
    std::string first_key;
    bool wanted = false;
    bool declined = false;  // the definition has none for this node (a constant B)
    std::weak_ptr<const Kernel> kernel;
  };
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::weak_ptr<const Kernel>> kernels_;
  std::unordered_map<std::string, AnySize> any_size_;
  size_t inserts_since_sweep_ = 0;
  Stats stats_;
};

// Constants up to this size are keyed by their bytes (axes, shapes, scales:
// a new plan folds them into new storage with the same values); larger ones
// by their storage.
constexpr size_t kKeyedByBytes = 256;

// The key above, or "" for a node that must not be shared (subgraphs).
// kBatchDims leaves the last two dims of every non-constant input and output
// out (the key of KernelDef::create_any_size's kernels).
enum class KeyShapes { kFull, kBatchDims };
std::string kernel_key(const KernelDef& def, const KernelBuildInfo& info, KeyShapes shapes = KeyShapes::kFull);

}  // namespace twinfer
