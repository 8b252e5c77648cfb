#include "runtime/placement.h"

#include <map>

#include "graph/domains.h"
#include "graph/passes/inline_if.h"
#include "graph/passes/unroll_loops.h"
#include "graph/subgraph.h"

namespace twinfer {

const char* sim_coverage_name(SimCoverage c) { return c == SimCoverage::kAll ? "all" : "cuda"; }

SimCoverage sim_coverage_from_name(const std::string& s) {
  if (s == "all") return SimCoverage::kAll;
  if (s == "cuda") return SimCoverage::kCuda;
  throw Error(ErrorKind::kInvalidArgument, "unknown sim coverage '" + s + "' (expected 'all' or 'cuda')");
}

const char* step_kind_name(StepKind k) {
  switch (k) {
    case StepKind::kHost: return "host";
    case StepKind::kDevice: return "device";
    case StepKind::kCopyToDevice: return "copy to device";
    case StepKind::kCopyToHost: return "copy to host";
  }
  return "host";
}

Backend placement_backend(Device d, SimCoverage c) {
  if (d.is_cuda() || (d.is_sim() && c == SimCoverage::kCuda)) return Backend::kCUDA;
  return Backend::kCPU;
}

namespace {

constexpr const char* kToDevice = "MemcpyToDevice";
constexpr const char* kToHost = "MemcpyToHost";
constexpr int64_t kSmallIntChain = 64;  // elements

bool is_control_flow(const graph::Node& n) {
  for (const auto& kv : n.attrs)
    if (kv.second.g || !kv.second.graphs.empty()) return true;
  return false;
}

bool has_strings(const graph::Graph& g, const graph::Node& n) {
  for (const auto* ids : {&n.inputs, &n.outputs})
    for (int v : *ids)
      if (v >= 0 && g.values[v].dtype == DType::kString) return true;
  return false;
}

bool is_integer(DType t) {
  switch (t) {
    case DType::kInt8: case DType::kInt16: case DType::kInt32: case DType::kInt64:
    case DType::kUInt8: case DType::kUInt16: case DType::kUInt32: case DType::kUInt64: case DType::kBool:
      return true;
    default:
      return false;
  }
}

// The device kernel for `n`, or nullptr with *why set.
const KernelDef* device_kernel_for(const graph::Graph& g, const graph::Node& n, const PlacementOptions& o,
                                   std::string* why) {
  if (o.device.is_cuda() || (o.device.is_sim() && o.sim_coverage == SimCoverage::kCuda)) {
    KernelBuildInfo cuda(g, n, o.opset, Backend::kCUDA, o.precision);
    const KernelDef* def = select_kernel(cuda, why);
    if (!def || o.device.is_cuda()) return def;
    // The simulated device runs the CPU kernel where CUDA would run its own.
  }
  KernelBuildInfo cpu(g, n, o.opset, Backend::kCPU, o.precision);
  return select_kernel(cpu, why);
}

}  // namespace

Placement place_nodes(graph::Graph& g, const PlacementOptions& o) {
  Placement pl;
  std::vector<MemorySpace>& space = pl.value_space;
  space.assign(g.values.size(), MemorySpace::kHost);
  for (int v : g.inputs) space[v] = MemorySpace::kDevice;

  // 1. Each node's place, in order (a node's inputs are placed before it).
  std::vector<NodePlacement> decided(g.nodes.size());
  std::vector<std::string> missing;  // for allow_cpu_fallback=false
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const graph::Node& n = g.nodes[i];
    NodePlacement& d = decided[i];
    std::string why;
    const KernelDef* dev = nullptr;
    d.source = static_cast<int>(i);
    auto forced = o.forced_host.find(static_cast<int>(i));
    if (forced != o.forced_host.end()) {
      d.note = forced->second;
    } else if (is_control_flow(n)) {
      d.note = "control flow runs on the host";
      // A Scan or Loop the load-time check let through (it was to unroll)
      // that the plan could not unroll: named, as a node without a kernel is.
      const std::string refusal = passes::unroll_refusal(n);
      if (!refusal.empty()) {
        d.note += " (not unrolled: " + refusal + ")";
        missing.push_back("'" + n.name + "' (" + n.op_type + "): " + d.note);
      }
    } else if (has_strings(g, n)) {
      d.note = "strings stay on the host";
    } else {
      bool host_inputs = true;
      for (int in : n.inputs)
        if (in >= 0 && !g.values[in].is_constant() && space[in] == MemorySpace::kDevice) host_inputs = false;
      bool small_ints = !n.outputs.empty();
      for (int out : n.outputs) {
        if (out < 0) continue;
        const auto& v = g.values[out];
        small_ints = small_ints && is_integer(v.dtype) && v.has_shape && sym_shape_known(v.shape) &&
                     shape_numel(sym_shape_values(v.shape)) <= kSmallIntChain;
      }
      if (host_inputs && small_ints && !n.inputs.empty()) {
        d.note = "small integer chain stays on the host";
      } else {
        dev = device_kernel_for(g, n, o, &why);
        if (!dev) {
          d.note = why;
          missing.push_back("'" + n.name + "' (" + n.op_type + "): " + why);
        }
      }
    }
    if (dev) {
      d.kind = StepKind::kDevice;
      d.kernel = dev;
      d.build_backend = o.device.is_cuda() ? Backend::kCUDA : Backend::kCPU;
    } else {
      KernelBuildInfo cpu(g, n, o.opset, Backend::kCPU, o.precision);
      std::string cpu_why;
      d.kind = StepKind::kHost;
      d.kernel = select_kernel(cpu, &cpu_why);
      d.build_backend = Backend::kCPU;
      if (!d.kernel) throw Error(ErrorKind::kUnsupportedOp, cpu_why, n.name, n.op_type);
    }
    const MemorySpace s = d.kind == StepKind::kDevice ? MemorySpace::kDevice : MemorySpace::kHost;
    for (int out : n.outputs)
      if (out >= 0) space[out] = s;
  }
  if (!o.allow_cpu_fallback && !missing.empty()) {
    std::string msg = "allow_cpu_fallback=False but " + std::to_string(missing.size()) + " node" +
                      (missing.size() > 1 ? "s have" : " has") + " no " + o.device.str() + " kernel: ";
    for (size_t i = 0; i < missing.size(); ++i) msg += (i ? "; " : "") + missing[i];
    throw Error(ErrorKind::kUnsupportedOp, msg);
  }

  // 2. Rewrite: copies in front of the nodes that read a value from the
  // other space (one per value and direction), device twins of constants.
  std::map<std::pair<int, MemorySpace>, int> twin;  // (value, wanted space) -> value in that space
  std::vector<graph::Node> nodes;
  nodes.reserve(g.nodes.size() * 2);
  // A graph input the plan knows the value of (it keys the plan: a ReduceSum's
  // axes, TopK's k) is a constant here, but a run binds the caller's tensor
  // to it, staged on the device: a host node reads a host twin of the
  // constant instead (the same value, as the plan is keyed by it).
  std::vector<char> is_input(g.values.size(), 0);
  for (int v : g.inputs)
    if (v >= 0) is_input[v] = 1;
  auto value_in = [&](int v, MemorySpace want) -> int {
    if (v < 0) return v;
    const graph::Value& val = g.values[v];
    if (val.is_constant()) {
      if (want == MemorySpace::kHost && !(static_cast<size_t>(v) < is_input.size() && is_input[v])) return v;
      auto it = twin.find({v, want});
      if (it != twin.end()) return it->second;
      graph::Value c = val;  // the same host tensor: kernels read constants on the host when they are built
      c.name = val.name + (want == MemorySpace::kDevice ? "@device" : "@host");
      c.producer = -1;
      const int id = static_cast<int>(g.values.size());
      g.values.push_back(std::move(c));
      g.index_value(id);
      space.push_back(want);
      twin[{v, want}] = id;
      return id;
    }
    if (space[v] == want || !o.insert_copies) return v;
    auto it = twin.find({v, want});
    if (it != twin.end()) return it->second;
    graph::Value copy;
    copy.name = val.name + (want == MemorySpace::kDevice ? "@device" : "@host");
    copy.dtype = val.dtype;
    copy.elem_type = val.elem_type;
    copy.has_shape = val.has_shape;
    copy.shape = val.shape;
    const int id = static_cast<int>(g.values.size());
    g.values.push_back(std::move(copy));
    g.index_value(id);
    space.push_back(want);
    graph::Node cn;
    cn.name = g.values[id].name;
    cn.op_type = want == MemorySpace::kDevice ? kToDevice : kToHost;
    cn.domain = kTwinferDomain;
    cn.inputs = {v};
    cn.outputs = {id};
    nodes.push_back(std::move(cn));
    NodePlacement np;
    np.kind = want == MemorySpace::kDevice ? StepKind::kCopyToDevice : StepKind::kCopyToHost;
    pl.nodes.push_back(np);
    twin[{v, want}] = id;
    return id;
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    graph::Node n = g.nodes[i];
    const MemorySpace want = decided[i].kind == StepKind::kDevice ? MemorySpace::kDevice : MemorySpace::kHost;
    for (int& in : n.inputs) in = value_in(in, want);
    nodes.push_back(std::move(n));
    pl.nodes.push_back(decided[i]);
  }
  // Engine outputs are device values.
  for (int& out : g.outputs)
    if (out >= 0 && !g.values[out].is_constant() && space[out] == MemorySpace::kHost &&
        g.values[out].producer >= 0)
      out = value_in(out, MemorySpace::kDevice);
  g.nodes = std::move(nodes);
  for (auto& v : g.values) v.producer = -1;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int out : g.nodes[i].outputs)
      if (out >= 0) g.values[out].producer = static_cast<int>(i);
  return pl;
}

namespace {

// nodes_without_device_kernel for one graph whose values flagged in
// `shape_only` fold (constants, shape inputs; a branch's outer values that
// fold in the graph around it), appending to `r`.
void missing_kernels(const graph::Graph& g, Backend b, int64_t opset, std::vector<char> shape_only,
                     std::vector<std::string>* r);

// missing_kernels for subgraph `sub` of node n: its reads of n's captured
// values fold where those do, and so do the body inputs flagged in `folding`
// (a Loop's iteration number and condition, constants in each unrolled copy).
void missing_in_subgraph(const graph::Graph& sub, const graph::Node& n, const std::vector<char>& shape_only,
                         const std::vector<int>& folding, Backend b, int64_t opset, std::vector<std::string>* r) {
  const auto outer = graph::captured_inputs(n);
  std::vector<char> seed(sub.values.size(), 0);
  for (size_t v = 0; v < sub.values.size(); ++v) {
    auto it = outer.find(sub.values[v].name);
    if (sub.values[v].producer < 0 && it != outer.end() && it->second >= 0) seed[v] = shape_only[it->second];
  }
  for (int v : folding)
    if (v >= 0) seed[v] = 1;
  missing_kernels(sub, b, opset, std::move(seed), r);
}

// Whether Scan/Loop node n of g unrolls once a plan knows what folds (graph/
// passes/unroll_loops.h): nothing static stops it, and a Loop's trip count
// folds and its condition is absent or folds. The plan may still refuse it
// (too many nodes): placement then names it.
bool may_unroll(const graph::Graph& g, const graph::Node& n, const std::vector<char>& shape_only, int64_t opset) {
  if (!n.domain.empty() || (n.op_type != "Scan" && n.op_type != "Loop")) return false;
  if (!passes::static_unroll_refusal(g, n, opset).empty()) return false;
  if (n.op_type == "Scan") return true;
  return n.inputs[0] >= 0 && shape_only[n.inputs[0]] && (n.inputs[1] < 0 || shape_only[n.inputs[1]]);
}

void missing_kernels(const graph::Graph& g, Backend b, int64_t opset, std::vector<char> shape_only,
                     std::vector<std::string>* r) {
  for (size_t v = 0; v < g.values.size(); ++v)
    if (g.values[v].is_constant()) shape_only[v] = 1;
  std::vector<char> folds(g.nodes.size(), 0);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const auto& n = g.nodes[i];
    bool f = n.domain.empty() && (n.op_type == "Shape" || n.op_type == "Size");
    if (!f && !is_control_flow(n)) {
      f = true;
      for (int in : n.inputs)
        if (in >= 0 && !shape_only[in]) f = false;
    }
    folds[i] = f;
    if (f)
      for (int out : n.outputs)
        if (out >= 0) shape_only[out] = 1;
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const auto& n = g.nodes[i];
    if (folds[i]) continue;
    // An If whose condition folds becomes its branch (graph/passes/
    // inline_if.h): either branch's nodes must have kernels instead.
    if (n.domain.empty() && n.op_type == "If" && !n.inputs.empty() && n.inputs[0] >= 0 && shape_only[n.inputs[0]] &&
        passes::if_inlining_wanted()) {
      for (const char* name : {"then_branch", "else_branch"}) {
        const graph::Attribute* a = n.attr(name);
        if (a && a->g) missing_in_subgraph(*a->g, n, shape_only, {}, b, opset, r);
      }
      continue;
    }
    // A loop that unrolls is its body's nodes, repeated.
    if (may_unroll(g, n, shape_only, opset)) {
      const graph::Attribute* a = n.attr("body");
      if (a && a->g) {
        const graph::Graph& body = *a->g;
        std::vector<int> folding;
        if (n.op_type == "Loop")
          for (size_t k = 0; k < 2 && k < body.inputs.size(); ++k) folding.push_back(body.inputs[k]);
        missing_in_subgraph(body, n, shape_only, folding, b, opset, r);
        continue;
      }
    }
    std::string why;
    if (n.domain.empty() && (n.op_type == "Scan" || n.op_type == "Loop")) {
      why = passes::static_unroll_refusal(g, n, opset);
      why = ": control flow runs on the host (not unrolled: " +
            (why.empty() ? std::string("its trip count is not computed from constants, shapes and shape or "
                                       "steering inputs alone")
                         : why) +
            ")";
    }
    if (is_control_flow(n) || !any_kernel_for(n.domain, n.op_type, b))
      r->push_back("'" + n.name + "' (" + (n.domain.empty() ? n.op_type : n.domain + "::" + n.op_type) + ")" + why);
  }
}

}  // namespace

std::vector<std::string> nodes_without_device_kernel(const graph::Graph& g, Device d, SimCoverage c,
                                                     const std::vector<int>& shape_inputs, int64_t opset) {
  // Shape arithmetic folds into constants once a plan knows the input
  // shapes (Shape -> Gather -> Concat -> Reshape) and the shape inputs'
  // values: nodes computed only from constants, Shape / Size and shape
  // inputs are never run, on any device.
  std::vector<char> shape_only(g.values.size(), 0);
  for (int i : shape_inputs) shape_only[g.inputs[i]] = 1;
  std::vector<std::string> r;
  missing_kernels(g, placement_backend(d, c), opset, std::move(shape_only), &r);
  return r;
}

}  // namespace twinfer
