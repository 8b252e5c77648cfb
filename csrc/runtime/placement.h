// Placement: for a plan on a device (cuda, or the simulated device), which
// nodes run there and which stay on the host, with explicit copy nodes
// (com.twinfer MemcpyToDevice / MemcpyToHost) wherever a value crosses from
// one memory space to the other — so memory planning, kernel reports and
// profiles see every transfer as a step of its own.
//
// A node runs on the device when a device kernel supports it; otherwise on
// the host (the CPU kernel), and kernel_report says why. Control flow
// (If/Loop/Scan, which evaluate subgraphs on the host) and small integer
// chains computed from host values (shape arithmetic the folder could not
// fold) stay on the host by choice.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/device_api.h"
#include "graph/ir.h"
#include "ops/kernel.h"

namespace twinfer {

// Which nodes the simulated device takes: every node with a CPU kernel
// ("all", the most device work to check), or only the nodes CUDA has a
// kernel for ("cuda": the simulated device then places exactly as cuda:0
// would, with the same fallbacks and copies).
enum class SimCoverage { kAll, kCuda };
const char* sim_coverage_name(SimCoverage c);
SimCoverage sim_coverage_from_name(const std::string& s);

struct PlacementOptions {
  Device device;
  int64_t opset = 0;
  Precision precision = Precision::kFP32;
  SimCoverage sim_coverage = SimCoverage::kAll;
  bool allow_cpu_fallback = true;
  bool insert_copies = true;  // false only for the simulated device's "copy" fault (runtime/faults.h)
  // Nodes (by index in the graph given to place_nodes) that must run on the
  // host, with why: a device kernel that supported the node but could not
  // be built for it (no cuBLASLt algorithm, say) sends it back here.
  std::map<int, std::string> forced_host;
};

enum class StepKind : uint8_t {
  kHost,          // a CPU kernel on the host thread
  kDevice,        // a device kernel in stream order
  kCopyToDevice,  // host -> device copy in stream order
  kCopyToHost,    // device -> host copy in stream order
};
const char* step_kind_name(StepKind k);

struct NodePlacement {
  int source = -1;  // index of the node in the graph before placement (-1: an inserted copy)
  StepKind kind = StepKind::kHost;
  const KernelDef* kernel = nullptr;      // what to build (none for copies)
  Backend build_backend = Backend::kCPU;  // the backend KernelBuildInfo names
  std::string note;                       // why a node is on the host ("" on the device)
};

struct Placement {
  std::vector<NodePlacement> nodes;      // per node of the rewritten graph
  std::vector<MemorySpace> value_space;  // per value id: kDevice or kHost
};

// The backend whose kernels run a device's nodes (cuda: kCUDA; sim: the CPU
// kernels, or kCUDA's choices with coverage "cuda" — see device_kernel_for).
Backend placement_backend(Device d, SimCoverage c);

// Decides every node's place in `g` (specialised: concrete shapes) and
// rewrites it with copy nodes and device copies of constants (a constant
// read on the device becomes its own value, '<name>@device'). Graph inputs
// and outputs are device values. Throws kUnsupportedOp listing every node
// without a device kernel when allow_cpu_fallback is false.
Placement place_nodes(graph::Graph& g, const PlacementOptions& o);

// Load-time check (symbolic shapes) for allow_cpu_fallback=False: the nodes
// whose op has no device kernel at all, as "name (op)". Nodes computed only
// from constants, shapes and the shape inputs (indices into g.inputs, whose
// values plans fold in: shape and steering inputs) never run; an If whose
// condition is so computed is inlined, so its branches' nodes are checked;
// so is a loop that unrolls (a Scan at `opset` 9 on, a Loop whose trip count
// is so computed: graph/passes/unroll_loops.h), so its body's nodes are.
std::vector<std::string> nodes_without_device_kernel(const graph::Graph& g, Device d, SimCoverage c,
                                                     const std::vector<int>& shape_inputs, int64_t opset);

}  // namespace twinfer
