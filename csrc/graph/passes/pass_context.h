// What every graph pass needs to know beyond the graph itself.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/backend.h"
#include "graph/ir.h"
#include "ops/kernel.h"

namespace twinfer::passes {

// Whether a rewritten node has kernels, asked of a one-node graph holding it
// (one_node_accepted in rewrite_util.h builds that graph): the plan passes'
// question to the device's and the CPU's kernel registries.
using NodeSupport = std::function<bool(const graph::Graph& mini, const graph::Node& node)>;

struct PassContext {
  int64_t opset = 17;                   // default-domain opset of the model
  Backend backend = Backend::kCPU;      // where the graph will run
  // The plans run on a device (the simulated one too): elementwise chains
  // fuse there at plan time (fuse_elementwise.h), so load-time rewrites that
  // would only help a host plan (SiLU as one Swish) leave those ops alone.
  bool on_device = false;
  Precision precision = Precision::kFP32;
  int compute_capability = 0;           // backend kCUDA: the GPU's major*10+minor (0: unknown)
  bool allow_fusion = true;             // fusion passes may rewrite ops into com.twinfer ones
  size_t fold_limit_bytes = size_t(256) << 20;  // largest constant folding may create
  std::vector<std::string>* log = nullptr;      // passes append one line per rewrite kind
  // Eager evaluation (value-dependent plans): fold every node whose inputs are
  // known, whatever its size, random and control-flow ops included.
  bool evaluate_all = false;
  int num_threads = 1;                          // threads for the kernels folding runs
  // Eager evaluation: kernels kept from one run to the next (an engine's),
  // and which values are the run's own (ops/kernel.h's KernelReuse).
  KernelReuse* reuse = nullptr;
  const std::vector<char>* per_run = nullptr;
  void note(const std::string& line) const {
    if (log) log->push_back(line);
  }
};

}  // namespace twinfer::passes
