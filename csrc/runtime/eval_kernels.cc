#include "runtime/eval_kernels.h"

#include <unordered_map>

#include "graph/passes/pass_switch.h"
#include "runtime/kernel_cache.h"

namespace twinfer {

namespace {

bool has_subgraph(const graph::Node& n) {
  for (const auto& kv : n.attrs)
    if (kv.second.g || !kv.second.graphs.empty()) return true;
  return false;
}

// Node n of g alone in a graph of its own, the run's large values no longer
// constants (see eval_kernels.h); *out gets the copy of n. False when an
// output's shape is not known yet (a kernel that sizes its own outputs).
bool one_node_graph(const graph::Graph& g, const graph::Node& n, const std::vector<char>& per_run, graph::Graph* mini,
                    graph::Node* out) {
  std::unordered_map<int, int> ids;
  bool ok = true;
  auto copy = [&](int v, bool is_input) {
    auto it = ids.find(v);
    if (it != ids.end()) return it->second;
    graph::Value c = g.values[static_cast<size_t>(v)];
    c.producer = -1;
    c.partial.clear();
    const bool run_value = static_cast<size_t>(v) >= per_run.size() || per_run[static_cast<size_t>(v)];
    // A run's strings and sequences are host objects keyed by identity,
    // freed after the run: never shared.
    if (is_input && run_value && (dtype_is_container(c.dtype) || c.dtype == DType::kString)) ok = false;
    // Read when the kernel runs, not built in: all but a run's small integer
    // values (a computed shape, axes, a K), which key by their bytes. Small
    // float data (a [2, 4, 8, 1] column) changes every run and would miss.
    if (is_input && run_value && c.is_constant() && (c.constant.bytes() > kKeyedByBytes || !dtype_is_integer(c.dtype)))
      c.constant = Tensor();
    if (!is_input) c.constant = Tensor();
    const int id = static_cast<int>(mini->values.size());
    mini->values.push_back(std::move(c));
    ids.emplace(v, id);
    if (is_input && !mini->values.back().is_constant()) mini->inputs.push_back(id);
    return id;
  };
  *out = n;
  for (int& in : out->inputs)
    if (in >= 0) in = copy(in, true);
  if (!ok) return false;
  for (int& o : out->outputs) {
    if (o < 0) continue;
    const graph::Value& v = g.values[static_cast<size_t>(o)];
    if (!v.has_shape || !sym_shape_known(v.shape)) return false;
    o = copy(o, false);
  }
  mini->nodes.push_back(*out);
  for (int o : out->outputs)
    if (o >= 0) mini->values[static_cast<size_t>(o)].producer = 0;
  return true;
}

// Whether building n's kernel costs more than finding it again (the
// one-node graph and its key cost a few microseconds a node): ops that
// build oneDNN primitives or pack weights, and any node reading a weight
// larger than a key holds by bytes. A detector's tail is mostly slices,
// gathers and arithmetic, whose kernels cost less to build than to look up.
bool worth_keeping(const graph::Graph& g, const graph::Node& n, const std::vector<char>& per_run) {
  // (Any domain: com.twinfer's fused Conv / Gemm / MatMul / QMatMul / QConv
  // share these names.)
  static const char* kCostly[] = {"MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum", "LSTM", "GRU", "RNN",
                                  "Attention", "MatMulInteger", "ConvInteger", "QLinearConv", "QLinearMatMul",
                                  "QMatMul", "QConv"};
  for (const char* op : kCostly)
    if (n.op_type == op) return true;
  for (int in : n.inputs) {
    if (in < 0) continue;
    const graph::Value& v = g.values[static_cast<size_t>(in)];
    const bool weight = static_cast<size_t>(in) < per_run.size() && !per_run[static_cast<size_t>(in)];
    if (weight && v.is_constant() && v.constant.bytes() > kKeyedByBytes) return true;
  }
  return false;
}

}  // namespace

void EvalKernels::begin_run() {
  std::lock_guard<std::mutex> lock(mu_);
  ++run_;
  for (auto it = kernels_.begin(); it != kernels_.end();)
    it = run_ - it->second.used > kMaxIdleRuns ? kernels_.erase(it) : std::next(it);
}

std::shared_ptr<const Kernel> EvalKernels::kernel(const graph::Graph& g, const graph::Node& n, int64_t opset,
                                                  const std::vector<char>& per_run) {
  if (has_subgraph(n) || !worth_keeping(g, n, per_run)) return nullptr;
  graph::Graph mini;
  graph::Node node;
  if (!one_node_graph(g, n, per_run, &mini, &node)) return nullptr;
  const graph::Node& built = mini.nodes[0];
  // Anything the stripped form makes a kernel refuse or throw (it wants what
  // it was not given as a constant) leaves the node to the evaluator's own
  // kernel, as before.
  try {
    KernelBuildInfo info(mini, built, opset, Backend::kCPU, Precision::kFP32);
    const KernelDef* def = select_kernel(info, nullptr);
    if (!def) return nullptr;
    const std::string key = kernel_key(*def, info);
    if (key.empty()) return nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = kernels_.find(key);
      if (it != kernels_.end()) {
        it->second.used = run_;
        ++stats_.hits;
        return it->second.kernel;
      }
    }
    Entry e{def->create(info), run_, {}};
    // The constants the key names by their storage stay alive with it: a
    // freed one's address could come back holding other data (a weight of
    // a later plan's tail).
    for (size_t i = 0; i < built.inputs.size(); ++i)
      if (const Tensor* c = info.input_constant(i)) e.constants.push_back(*c);
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.misses;
    if (kernels_.size() < kMaxKernels) kernels_[key] = e;
    return e.kernel;
  } catch (const std::exception&) {
    return nullptr;
  }
}

bool eval_kernel_reuse_wanted() {
  static const bool wanted = passes::pass_enabled("TWINFER_EVAL_KERNEL_REUSE");
  return wanted;
}

EvalKernels::Stats EvalKernels::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s = stats_;
  s.held = kernels_.size();
  return s;
}

}  // namespace twinfer
