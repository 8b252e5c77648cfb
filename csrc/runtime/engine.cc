#include "runtime/engine.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <set>
#include <thread>

#include "core/device_info.h"
#include "core/parallel.h"
#include "graph/domains.h"
#include "graph/passes/expand_contrib.h"
#include "graph/passes/legacy_forms.h"
#include "graph/passes/pass_switch.h"
#include "graph/passes/pipeline.h"
#include "graph/passes/shape_inputs.h"
#include "graph/passes/unroll_loops.h"
#include "ops/schema.h"
#include "graph/subgraph.h"
#include "runtime/evaluate.h"
#include "runtime/execution_context.h"
#include "runtime/host_head.h"
#include "runtime/plan_builder.h"
#include "runtime/transfer.h"
#include "runtime/value_key.h"

namespace twinfer {

namespace {

constexpr int64_t kMinOpset = 1;
constexpr int64_t kMaxOpset = 28;

void collect_unsupported(const graph::Graph& g, Backend backend,
                         std::map<std::string, std::vector<std::string>>* missing) {
  for (const auto& n : g.nodes) {
    // The channel-blocked layout plans keep between CPU convolutions is
    // never a model's: its kernels trust the data, which a tensor's shape
    // does not describe, to be padded into blocks. (Channels-last ops carry
    // their layout in their shapes, and tests feed them directly.)
    const bool plan_only = n.domain == kBlockedDomain;
    const bool known = !plan_only && find_schema(n.domain, n.op_type) && any_kernel_for(n.domain, n.op_type, backend);
    if (!known) {
      std::string key = n.domain.empty() || n.domain == "ai.onnx" ? n.op_type : n.domain + "::" + n.op_type;
      (*missing)[key].push_back(n.name.empty() ? "<unnamed>" : n.name);
    }
    for (const auto& kv : n.attrs) {
      if (kv.second.g) collect_unsupported(*kv.second.g, backend, missing);
      for (const auto& sg : kv.second.graphs) collect_unsupported(*sg, backend, missing);
    }
  }
}

bool uses_default_domain(const graph::Graph& g) {
  for (const auto& n : g.nodes) {
    if (n.domain.empty() || n.domain == "ai.onnx") return true;
    for (const auto& kv : n.attrs) {
      if (kv.second.g && uses_default_domain(*kv.second.g)) return true;
      for (const auto& sg : kv.second.graphs)
        if (uses_default_domain(*sg)) return true;
    }
  }
  return false;
}

// The default-domain opset rules see. A model without one (ai.onnx.ml
// only) has no such node, but passes may add some (a Cast): they get the newest.
int64_t effective_opset(const graph::Model& m) { return m.opset("") ? m.opset("") : kMaxOpset; }

void check_opsets(const graph::Model& m) {
  std::vector<std::string> bad;
  const int64_t v = m.opset("");
  // Importing no default-domain opset is fine for a model that uses only
  // other domains (ai.onnx.ml alone, say).
  if (v == 0 && uses_default_domain(m.graph))
    bad.push_back("the model imports no default-domain (ai.onnx) opset but its nodes use that domain");
  else if (v != 0 && (v < kMinOpset || v > kMaxOpset))
    bad.push_back("ai.onnx opset " + std::to_string(v) + " (supported: " + std::to_string(kMinOpset) +
                  " to " + std::to_string(kMaxOpset) + ")");
  for (const auto& kv : m.opsets) {
    if (kv.first.empty() || kv.first == "ai.onnx" || kv.first == kTwinferDomain) continue;
    // Other domains are fine as long as no node uses an op we lack; that is
    // reported by the unsupported-op check with the node names.
  }
  if (!bad.empty()) {
    std::string msg = "unsupported opset: ";
    for (size_t i = 0; i < bad.size(); ++i) msg += (i ? "; " : "") + bad[i];
    throw Error(ErrorKind::kUnsupportedOp, msg);
  }
}

// A fed sequence/optional against its declared full type `want` (outermost
// first; kUndefined or a short list where the model leaves it open).
void check_value_type(const std::string& what, const std::vector<DType>& want, const Tensor& t, Device device) {
  if (want.empty() || want[0] == DType::kUndefined) return;
  const std::vector<DType> rest(want.begin() + 1, want.end());
  if (t.dtype() != want[0])
    throw Error(ErrorKind::kDType, what + " expects " + type_str(want[0], rest) + ", got " + t.type_name());
  if (!dtype_is_container(t.dtype())) {
    if (t.device() != device && !t.device().is_cpu())
      throw Error(ErrorKind::kDevice, what + " is on " + t.device().str() + " but the engine runs on " + device.str());
    return;
  }
  const auto& items = t.list().items;
  for (size_t k = 0; k < items.size(); ++k)
    check_value_type(what + (t.dtype() == DType::kSequence ? " item " + std::to_string(k) : " value"), rest, items[k],
                     device);
}

std::string signature_str(const std::vector<Shape>& shapes) {
  std::string s;
  for (const auto& sh : shapes) s += shape_str(sh);
  return s;
}

// FP8 GEMMs need E4M3 tensor cores: Ada (8.9) and Hopper (9.0) on.
void check_device_precision(Precision p, Device d) {
  if (p != Precision::kFP8 || !d.is_accelerator()) return;
  const int cc = device_api(d).compute_capability();
  if (cc < 89)
    throw Error(ErrorKind::kInvalidArgument, "precision 'fp8' needs a GPU of compute capability 8.9 or newer; " +
                                                 d.str() + " is " + std::to_string(cc / 10) + "." +
                                                 std::to_string(cc % 10));
}

}  // namespace

std::shared_ptr<Engine> Engine::create(graph::Model model, const EngineOptions& options) {
  std::shared_ptr<Engine> e(new Engine());
  e->options_ = options;
  e->prepare_device();
  if ((options.precision == Precision::kINT8 || options.precision == Precision::kFP8) && options.int8_amax.empty())
    throw Error(ErrorKind::kInvalidArgument,
                std::string("precision '") + precision_name(options.precision) +
                    "' needs calibrated activation ranges (twinfer.load(..., precision='" +
                    precision_name(options.precision) + "', calibration=data))");
  if (options.precision != Precision::kFP32 && options.precision != Precision::kINT8 &&
      !options.device.is_accelerator())
    throw Error(ErrorKind::kInvalidArgument, std::string("precision '") + precision_name(options.precision) +
                                                 "' is not supported on the CPU backend (it computes in fp32)");
  check_device_precision(options.precision, options.device);
  check_opsets(model);
  e->opset_ = effective_opset(model);
  e->opsets_ = model.opsets;
  e->backing_ = model.backing;
  e->nodes_in_model_ = model.graph.nodes.size();

  // onnxruntime's contrib ops in files its optimizer/quantizer saved become standard ops first.
  const int contrib = passes::expand_contrib_ops(model.graph, e->opset_);
  if (contrib) e->pass_log_.push_back("expand_contrib: " + std::to_string(contrib) + " com.microsoft ops -> standard ops");
  // Before opset 7: broadcast=1 with axis, Reshape's shape attribute (graph/passes/legacy_forms.h).
  const int legacy = passes::rewrite_legacy_forms(model.graph, e->opset_);
  if (legacy) e->pass_log_.push_back("legacy_forms: " + std::to_string(legacy) + " old-opset nodes rewritten");
  std::map<std::string, std::vector<std::string>> missing;
  collect_unsupported(model.graph, Backend::kCPU, &missing);
  if (!missing.empty()) {
    std::string msg = "unsupported ops: ";
    bool first = true;
    for (const auto& kv : missing) {
      msg += (first ? "" : "; ") + kv.first + " (node" + (kv.second.size() > 1 ? "s " : " ");
      for (size_t i = 0; i < kv.second.size() && i < 5; ++i) msg += (i ? ", " : "") + kv.second[i];
      if (kv.second.size() > 5) msg += ", ... " + std::to_string(kv.second.size() - 5) + " more";
      msg += ")";
      first = false;
    }
    throw Error(ErrorKind::kUnsupportedOp, msg);
  }

  e->make_overrides(model);
  graph::Graph& g = model.graph;
  // keep_float names a node without a name by its first output (as analyze()
  // reports it): such nodes take that name now, before passes fold others into
  // them and their outputs change (a Conv that absorbs a BatchNormalization
  // writes the BN's output).
  if (!options.keep_float.empty())
    for (auto& n : g.nodes)
      if (n.name.empty() && !n.outputs.empty() && n.outputs[0] >= 0) n.name = g.values[n.outputs[0]].name;
  graph::capture_implicit_inputs(g);  // subgraph reads of outer values become node inputs
  for (const auto& name : options.extra_outputs) {
    const int id = g.find_value(name);
    if (id < 0 || (g.values[id].producer < 0 && !g.values[id].is_constant() &&
                   std::find(g.inputs.begin(), g.inputs.end(), id) == g.inputs.end()))
      throw Error(ErrorKind::kInvalidArgument, "extra output '" + name + "' is not a value of the model's graph");
    g.outputs.push_back(id);
  }
  passes::PassContext pc = e->pass_context();
  pc.log = &e->pass_log_;
  passes::LoadPassOptions lo;
  lo.optimize = options.optimize;
  lo.int8 = {options.int8_amax, options.int8_unsigned, options.int8_channel_mean, options.keep_float, {},
             options.int8_per_token};
  for (const auto& [name, sm] : options.int8_smoothing) lo.int8.smoothing[name] = {sm.first, sm.second};
  lo.int8_weights = options.int8_weights;
  passes::run_load_passes(g, lo, pc);
  e->find_value_inputs(g);
  e->check_fallback(g);

  e->finish(std::move(g));
  return e;
}

void Engine::prepare_device() {
  const Device d = options_.device;
  if (!d.is_accelerator()) return;
  device_api(d);  // throws DeviceError when the build or the machine lacks it
  // Coverage "cuda" asks the CUDA kernel registry which nodes CUDA would take;
  // a build without the CUDA backend has no such registry, and would silently
  // place every node on the CPU instead.
  if (d.is_sim() && options_.sim_coverage == SimCoverage::kCuda && !cuda_compiled())
    throw Error(ErrorKind::kDevice,
                "sim_coverage='cuda' places nodes as the CUDA backend would, but this build has no CUDA backend "
                "(built with TWINFER_CUDA=OFF or without nvcc); use sim_coverage='all' or a CUDA build");
  constants_ = std::make_unique<ConstantStore>(d);
}

Backend Engine::passes_backend() const {
  return options_.device.is_accelerator() ? placement_backend(options_.device, options_.sim_coverage) : Backend::kCPU;
}

passes::PassContext Engine::pass_context() const {
  passes::PassContext pc;
  pc.opset = opset_;
  // Fusions are decided for the backend that runs the nodes: a fused op the
  // device has no kernel for would drag its neighbours onto the CPU.
  pc.backend = passes_backend();
  pc.on_device = options_.device.is_accelerator();
  if (pc.backend == Backend::kCUDA) pc.compute_capability = device_api(options_.device).compute_capability();
  pc.precision = options_.precision;
  return pc;
}

void Engine::find_value_inputs(const graph::Graph& g) {
  shape_inputs_ = passes::shape_input_indices(g, opset_);
  steering_inputs_ = passes::steering_input_indices(g, passes::unrolling_wanted(), opset_);
  value_keyed_ = shape_inputs_;
  value_keyed_.insert(value_keyed_.end(), steering_inputs_.begin(), steering_inputs_.end());
  std::sort(value_keyed_.begin(), value_keyed_.end());
  value_keyed_.erase(std::unique(value_keyed_.begin(), value_keyed_.end()), value_keyed_.end());
}

void Engine::check_fallback(const graph::Graph& g) const {
  if (!options_.device.is_accelerator() || options_.allow_cpu_fallback) return;
  const auto missing = nodes_without_device_kernel(g, options_.device, options_.sim_coverage, value_keyed_, opset_);
  if (missing.empty()) return;
  std::string msg = "allow_cpu_fallback=False but " + std::to_string(missing.size()) + " node" +
                    (missing.size() > 1 ? "s have" : " has") + " no " + options_.device.str() + " kernel: ";
  for (size_t i = 0; i < missing.size(); ++i) {
    if (i == 20) {
      msg += ", ... " + std::to_string(missing.size() - 20) + " more";
      break;
    }
    msg += (i ? ", " : "") + missing[i];
  }
  throw Error(ErrorKind::kUnsupportedOp, msg);
}

std::shared_ptr<Engine> Engine::create_saved(graph::Model model, const SavedEngineInfo& info,
                                             const EngineOptions& options) {
  std::shared_ptr<Engine> e(new Engine());
  e->options_ = options;
  e->options_.precision = info.precision;
  e->options_.optimize = info.optimize;
  e->prepare_device();
  // The saved engine's precision, not the caller's; and FP8 GEMMs an FP8 QDQ
  // model fused into on a newer GPU. The CPU computes in fp32: a lowered
  // engine there would claim a precision it does not run.
  if (info.precision != Precision::kFP32 && info.precision != Precision::kINT8 && !options.device.is_accelerator())
    throw Error(ErrorKind::kInvalidArgument, std::string("this saved engine is ") + precision_name(info.precision) +
                                                 ", which the CPU backend does not run (it computes in fp32): load "
                                                 "the ONNX model on the CPU, or the engine on a GPU");
  check_device_precision(info.precision, options.device);
  for (const auto& n : model.graph.nodes)
    if (n.domain == kTwinferDomain && n.op_type == "FP8MatMul") {
      check_device_precision(Precision::kFP8, options.device);
      break;
    }
  check_opsets(model);
  e->opset_ = effective_opset(model);
  e->opsets_ = model.opsets;
  e->backing_ = model.backing;
  e->nodes_in_model_ = info.nodes_in_model;
  e->pass_log_ = info.pass_log;
  e->input_defaults_ = info.input_defaults;
  for (const auto& [name, dtype, shape] : info.folded_overridable)
    e->folded_overridable_.push_back({name, dtype, sym_shape_from(shape)});
  // The file names ops by name: one this build lacks (a newer twinfer's
  // fused op) is reported like any unsupported op.
  std::map<std::string, std::vector<std::string>> missing;
  collect_unsupported(model.graph, Backend::kCPU, &missing);
  if (!missing.empty()) {
    std::string msg = "the saved engine uses ops this twinfer does not have: ";
    for (const auto& kv : missing) msg += kv.first + " ";
    throw Error(ErrorKind::kUnsupportedOp, msg + "(load the ONNX model again)");
  }
  e->find_value_inputs(model.graph);
  e->check_fallback(model.graph);
  e->finish(std::move(model.graph));
  return e;
}

std::shared_ptr<Engine> Engine::create_stage(graph::Graph g, const Engine& parent) {
  std::shared_ptr<Engine> e(new Engine());
  e->options_ = parent.options_;
  e->options_.extra_outputs.clear();
  e->prepare_device();
  e->opset_ = parent.opset_;
  e->opsets_ = parent.opsets_;
  e->backing_ = parent.backing_;
  e->nodes_in_model_ = g.nodes.size();
  e->find_value_inputs(g);
  e->check_fallback(g);
  e->finish(std::move(g));
  return e;
}

void Engine::make_overrides(graph::Model& model) {
  graph::Graph& g = model.graph;
  const auto& overridable = model.overridable_initializers;
  for (const auto& name : options_.override_initializers)
    if (std::find(overridable.begin(), overridable.end(), name) == overridable.end()) {
      std::string known;
      for (const auto& n : overridable) known += (known.empty() ? "'" : ", '") + n + "'";
      throw Error(ErrorKind::kInvalidArgument,
                  "override_initializers: '" + name + "' is not an initializer the model also lists as an input (" +
                      (known.empty() ? std::string("it has none") : "those are " + known) + ")");
    }
  for (const auto& name : overridable) {
    const int id = g.find_value(name);
    graph::Value& v = g.values[id];
    const bool override = options_.override_all_initializers ||
                          std::find(options_.override_initializers.begin(), options_.override_initializers.end(),
                                    name) != options_.override_initializers.end();
    if (!override) {
      folded_overridable_.push_back({name, v.dtype, v.shape});
      continue;
    }
    // An input now, typed and shaped by its default; nothing folds it.
    input_defaults_.emplace_back(name, std::move(v.constant));
    v.constant = Tensor();
    g.inputs.push_back(id);
  }
}

void Engine::finish(graph::Graph g) {
  for (int v : g.inputs) {
    const auto& val = g.values[v];
    inputs_.push_back({val.name, val.dtype, val.has_shape ? val.shape : SymShape{}, val.has_shape});
  }
  for (int v : g.outputs) {
    const auto& val = g.values[v];
    if (val.dtype == DType::kUndefined)
      throw Error(ErrorKind::kModelFormat, "the type of graph output '" + val.name + "' is unknown");
    outputs_.push_back({val.name, val.dtype, val.has_shape ? val.shape : SymShape{}, val.has_shape});
  }
  graph_ = std::move(g);
  // A fork while another thread of the parent builds a plan: the child has
  // no such thread, so nothing would take that key out of building_ and a
  // run needing it would wait forever. (The worker's own builds finish
  // before any fork.) Threads of the parent that waited for such a build
  // are counted in the condition variable's state, where a notify would
  // wait for them: a fresh one replaces it (never destroyed, as that would
  // wait too).
  plan_ahead_.on_fork_child([this] {
    building_.clear();
    new (&plan_built_) std::condition_variable();
  });

  // Fully static models get their plan now: errors surface at load and the
  // first run pays nothing extra. Not with steering inputs: their runs use
  // plans keyed by the values (a plan without them, its Ifs and Loops left
  // as control flow, would be thrown away; without CPU fallback, refused).
  bool all_static = true;
  std::vector<Shape> shapes;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    // An input declared without a shape has an unknown rank, not rank 0.
    const auto& in = inputs_[i];
    all_static &= graph_.values[graph_.inputs[i]].has_shape && sym_shape_known(in.shape);
    if (all_static) shapes.push_back(sym_shape_values(in.shape));
  }
  if (all_static && steering_inputs_.empty()) plan_for(shapes);
}

void Engine::save(const std::string& path, const std::map<std::string, std::string>& metadata) const {
  graph::Model m;
  m.opsets = opsets_;
  m.graph = graph_;  // constants share storage: nothing is copied
  SavedEngineInfo info;
  info.precision = options_.precision;
  info.optimize = options_.optimize;
  info.pass_log = pass_log_;
  info.nodes_in_model = nodes_in_model_;
  info.metadata = metadata;
  info.input_defaults = input_defaults_;
  for (const auto& s : folded_overridable_)
    info.folded_overridable.emplace_back(s.name, s.dtype, sym_shape_values(s.shape));
  // Which backend the load-time passes fused for: a CPU engine's fused ops
  // may have no device kernel (they then run on the CPU), and the reverse.
  info.metadata["backend"] = backend_name(passes_backend());
  write_engine_file(path, m, info);
}

int Engine::default_threads() const {
  return options_.num_threads > 0 ? options_.num_threads : std::max(1, omp_get_max_threads());
}

EngineStats Engine::stats() const {
  EngineStats s;
  s.nodes_in_model = nodes_in_model_;
  s.nodes_optimized = graph_.nodes.size();
  s.pass_log = pass_log_;
  std::lock_guard<std::mutex> lock(plans_mutex_);
  s.plans_cached = plans_.size();
  s.plan_hits = plan_hits_;
  s.plan_misses = plan_misses_;
  s.plans_ahead = plans_ahead_;
  s.plans_ahead_used = plans_ahead_used_;
  s.plans_building = building_.size();
  for (int i : shape_inputs_) s.shape_inputs.push_back(inputs_[i].name);
  for (int i : steering_inputs_) s.steering_inputs.push_back(inputs_[i].name);
  s.steering_active = steering_active_.load(std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> steered(steered_mutex_);
    s.steered_graphs = steered_graphs_.size();
  }
  {
    std::lock_guard<std::mutex> sources(sources_mutex_);
    s.fixed_dims_graphs = fixed_dims_built_;
  }
  const KernelCache::Stats ks = kernels_.stats();
  s.kernels_built = ks.misses;
  s.kernels_reused = ks.hits;
  s.kernels_any_size = ks.any_size_built;
  const EvalKernels::Stats es = eval_kernels_.stats();
  s.eval_kernels_built = es.misses;
  s.eval_kernels_reused = es.hits;
  s.eval_kernels_held = es.held;
  if (!options_.device.is_accelerator())
    if (const HostHead* h = host_head()) {
      s.host_head_nodes = h->head.nodes.size();
      s.host_head_rest_nodes = h->rest.nodes.size();
      std::shared_ptr<const Engine> rest;
      {
        std::lock_guard<std::mutex> lock(h->mutex);
        rest = h->rest_engine;
      }
      if (rest) s.host_head_rest_kernels_built = rest->stats().kernels_built;
    }
  return s;
}

namespace {

// The cache entry whose key `same` accepts, moved to the front of the list
// (most recently used first); null if none. The caller holds the plans'
// mutex.
template <typename PlanList, typename Same>
typename PlanList::value_type* find_cached_plan(PlanList& plans, Same same) {
  for (auto it = plans.begin(); it != plans.end(); ++it) {
    if (!same(it->first)) continue;
    if (it != plans.begin()) plans.splice(plans.begin(), plans, it);
    return &plans.front();
  }
  return nullptr;
}

// Two plan keys for the same plan (Engine::PlanKey, private to it).
template <typename Key>
bool same_key(const Key& a, const Key& b) {
  return a.keyed == b.keyed && a.shapes == b.shapes && same_values(a.values, b.values);
}

}  // namespace

std::shared_ptr<const Plan> Engine::plan_for(const std::vector<Shape>& shapes, bool may_build) const {
  // Shapes from a report's caller, not from tensors run checks: the same
  // checks here (a short list used to read past its end).
  if (shapes.size() != inputs_.size())
    throw Error(ErrorKind::kInvalidArgument, "expected shapes for " + std::to_string(inputs_.size()) +
                                                 " inputs, got " + std::to_string(shapes.size()));
  for (size_t i = 0; i < shapes.size(); ++i) {
    for (int64_t d : shapes[i])
      if (d < 0)
        throw Error(ErrorKind::kShape, "input '" + inputs_[i].name + "': negative dim in " + shape_str(shapes[i]));
    if (!dtype_is_container(inputs_[i].dtype)) check_input_shape(inputs_[i], shapes[i]);
  }
  return plan_for(shapes, {}, {}, may_build);
}

void Engine::check_input_shape(const IOSpec& spec, const Shape& s) {
  if (!spec.has_shape) return;  // declared without a shape: any rank, any dims
  if (s.size() != spec.shape.size())
    throw Error(ErrorKind::kShape, "input '" + spec.name + "' expects rank " + std::to_string(spec.shape.size()) +
                                       " " + sym_shape_str(spec.shape) + ", got " + shape_str(s));
  for (size_t d = 0; d < s.size(); ++d)
    if (spec.shape[d].known() && spec.shape[d].value != s[d])
      throw Error(ErrorKind::kShape, "input '" + spec.name + "' expects shape " + sym_shape_str(spec.shape) +
                                         ", got " + shape_str(s) + " (dim " + std::to_string(d) + ")");
}

std::shared_ptr<const Plan> Engine::plan_for(const std::vector<Shape>& shapes, const std::vector<int>& keyed,
                                             const std::vector<Tensor>& values, bool may_build) const {
  std::unique_lock<std::mutex> lock(plans_mutex_);
  const auto same = [&](const PlanKey& k) {
    return k.keyed == keyed && k.shapes == shapes && same_values(k.values, values);
  };
  for (;;) {
    if (auto* e = find_cached_plan(plans_, same)) return count_hit(e->first, e->second);
    if (std::none_of(building_.begin(), building_.end(), same)) break;
    plan_built_.wait(lock);  // another thread builds this very plan (or builds it ahead)
  }
  if (!may_build)
    throw Error(ErrorKind::kInvalidArgument,
                "this run is being captured into a graph, which cannot build a plan (that allocates and "
                "synchronises): run the engine once with these inputs before capturing");
  ++plan_misses_;
  NewPlan np = new_plan(shapes, keyed, values);  // the engine's state, under the lock
  building_.push_back(np.key);
  lock.unlock();
  std::shared_ptr<const Plan> p;
  try {
    p = build(np);
  } catch (...) {
    lock.lock();
    built(np.key);  // whoever waited builds it and gets the error too
    throw;
  }
  lock.lock();
  built(np.key);
  cache(std::move(np.key), p);
  first_use(shapes, keyed, values, *p);
  return p;
}

Engine::NewPlan Engine::new_plan(const std::vector<Shape>& shapes, const std::vector<int>& keyed,
                                 const std::vector<Tensor>& values) const {
  // The key and the plan hold copies: the caller's arrays may change after.
  NewPlan np{PlanKey{shapes, keyed, {}}, {}};
  if (!keyed.empty()) {
    np.by_input.resize(shapes.size());
    for (size_t k = 0; k < keyed.size(); ++k) {
      np.key.values.push_back(values[k].clone());
      np.by_input[keyed[k]] = np.key.values.back();
    }
  }
  return np;
}

std::shared_ptr<const graph::Graph> Engine::source_of(const PlanKey& key) const {
  // With steering values, plans come from the graph those values steer
  // (its Ifs inlined and rewritten once, not per plan). The engine's own
  // graph lives as long as the engine: held without owning.
  const std::vector<Tensor> steer = values_of(steering_inputs_, key.keyed, key.values);
  std::shared_ptr<const graph::Graph> base =
      steer.size() == steering_inputs_.size() && !steer.empty() ? steered_graph(steer) : nullptr;
  if (!base) base = std::shared_ptr<const graph::Graph>(std::shared_ptr<const graph::Graph>{}, &graph_);
  std::lock_guard<std::mutex> lock(sources_mutex_);
  return plan_source_graph(base, key.shapes);
}

std::shared_ptr<const Plan> Engine::build(const NewPlan& np) const {
  // The graph it starts from: chosen here, outside plans_mutex_ (a steered
  // graph's passes or a fixed-dims binding, once per value or class of
  // shapes, would otherwise hold up every cached run meanwhile).
  const std::shared_ptr<const graph::Graph> source = source_of(np.key);
  PlanSource src{*source, opset_, options_, constants_.get(), &kernels_};
  // An engine with shape inputs asks first for a plan by shapes alone, to
  // learn whether their values matter; the plan it runs is keyed by them.
  src.split_value_dependent = shape_inputs_.empty() || !np.key.keyed.empty();
  // A build is never part of a graph (a capturing run may not build, see
  // plan_for): its uploads and library set-up must neither fail in nor
  // break a capture another thread has under way (torch.cuda.graph's global
  // mode); and on the engine's device from the first call, on any thread.
  std::shared_ptr<void> current, relaxed;
  if (options_.device.is_accelerator()) {
    DeviceApi& api = device_api(options_.device);
    current = api.make_current();
    relaxed = api.relax_capture();
  }
  // Kernels that keep a variant per thread budget (oneDNN's) build the one
  // the runs use (a context's default), not the building thread's: a plan
  // built under another budget made a second variant on its first run.
  ThreadScope budget(default_threads());
  // Constants folded for plans since evicted (per-shape masks, positions)
  // go now, where a build may wait for the device, not on a run; not while a
  // capture of ours is under way (cudaFree waits for the whole device, which
  // would invalidate it: the next build frees them).
  if (constants_ && !(options_.device.is_accelerator() && device_api(options_.device).captures_under_way()))
    constants_->release_unused();
  // Tests slow builds down to see what runs meanwhile (tests/test_plan_ahead.py).
  if (const char* ms = std::getenv("TWINFER_TEST_PLAN_DELAY_MS"))
    std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(ms)));
  return build_plan(src, np.key.shapes, np.by_input);
}

void Engine::cache(PlanKey key, std::shared_ptr<const Plan> plan) const {
  plans_.emplace_front(std::move(key), std::move(plan));
  while (plans_.size() > std::max<size_t>(1, options_.max_cached_plans)) plans_.pop_back();
}

bool Engine::cached(const PlanKey& key) const {
  for (const auto& [k, p] : plans_)
    if (same_key(k, key)) return true;
  return false;
}

std::shared_ptr<const Plan> Engine::count_hit(PlanKey& key, std::shared_ptr<const Plan> plan) const {
  ++plan_hits_;
  if (key.ahead) {
    key.ahead = false;
    ++plans_ahead_used_;
    first_use(key.shapes, key.keyed, key.values, *plan);
  }
  return plan;
}

void Engine::first_use(const std::vector<Shape>& shapes, const std::vector<int>& keyed,
                       const std::vector<Tensor>& values, const Plan& plan) const {
  // Building ahead is an optimisation: nothing it does (a thread that cannot
  // start, memory for a key) may fail the run that has its plan already.
  try {
    guess_next(shapes, keyed, values, plan);
  } catch (...) {
    shape_run_.recent.clear();
  }
}

void Engine::guess_next(const std::vector<Shape>& shapes, const std::vector<int>& keyed,
                        const std::vector<Tensor>& values, const Plan& plan) const {
  // A plan the host evaluator runs saves nothing when built early (and a
  // model with shape inputs builds one per shapes before its keyed plan).
  if (plan.value_dependent) return;
  ShapeRun& run = shape_run_;
  // Building ahead would evict the plan in use from a cache of one.
  if (!options_.plan_ahead || options_.max_cached_plans < 2) {
    run.recent.clear();
    return;
  }
  if (run.keyed != keyed || !same_values(run.values, values)) {
    run.keyed = keyed;
    run.values.clear();
    for (const Tensor& v : values) run.values.push_back(v.clone());  // the caller's arrays may change
    run.recent.clear();
  }
  run.recent.push_back(shapes);
  if (run.recent.size() > 3) run.recent.erase(run.recent.begin());
  std::optional<std::vector<Shape>> next = next_in_progression(run.recent);
  if (!next) return;
  PlanKey key{std::move(*next), keyed, run.values, true};
  if (cached(key) || std::any_of(building_.begin(), building_.end(), [&](const PlanKey& k) { return same_key(k, key); }))
    return;
  if (plan_ahead_.post([this, key] { build_ahead(key); })) building_.push_back(std::move(key));
}

void Engine::build_ahead(const PlanKey& key) const {
  // A posted key is in building_ until this ends, however it ends: runs
  // that need it wait meanwhile, then find the plan or build it themselves.
  std::unique_lock<std::mutex> lock(plans_mutex_);
  try {
    if (!cached(key)) {
      NewPlan np = new_plan(key.shapes, key.keyed, key.values);
      np.key.ahead = true;
      lock.unlock();
      std::shared_ptr<const Plan> p = build(np);
      lock.lock();
      cache(std::move(np.key), std::move(p));
      ++plans_ahead_;
    }
  } catch (...) {
    // Shapes no run has asked for may be ones no plan can take: dropped,
    // and the run that comes with them, if one does, gets the error.
    if (!lock.owns_lock()) lock.lock();
  }
  built(key);
}

void Engine::built(const PlanKey& key) const {
  auto it = std::find_if(building_.begin(), building_.end(), [&](const PlanKey& k) { return same_key(k, key); });
  if (it != building_.end()) building_.erase(it);
  plan_built_.notify_all();
}

std::shared_ptr<const graph::Graph> Engine::plan_source_graph(const std::shared_ptr<const graph::Graph>& base_graph,
                                                              const std::vector<Shape>& shapes) const {
  const graph::Graph& base = *base_graph;
  // Without optimize nothing folds; shapes that do not fit the inputs
  // (memory_report and kernel_report take any) are the plan's to refuse.
  if (!options_.optimize || shapes.size() != base.inputs.size()) return base_graph;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const graph::Value& v = base.values[base.inputs[i]];
    if (v.has_shape && v.shape.size() != shapes[i].size()) return base_graph;
  }
  auto h = std::find_if(dims_history_.begin(), dims_history_.end(),
                        [&](const DimsHistory& d) { return d.base == &base; });
  if (h == dims_history_.end()) {
    dims_history_.push_back(DimsHistory{&base, shapes, passes::changed_dims(shapes, shapes)});
    return base_graph;
  }
  // Once a dim has changed it counts as changing from then on (a decoder's
  // past length), so the bound graph stays the same while only it moves.
  // (A rank the model leaves open may change too: then every dim of that
  // input counts as changing.)
  const passes::DimMask changed = passes::changed_dims(shapes, h->last);
  for (size_t i = 0; i < changed.size(); ++i) {
    if (h->varying[i].size() != changed[i].size()) h->varying[i].assign(changed[i].size(), 1);
    for (size_t d = 0; d < changed[i].size(); ++d) h->varying[i][d] |= changed[i][d];
  }
  h->last = shapes;
  if (!passes::any_dim(h->varying)) return base_graph;
  std::vector<Shape> masked = passes::mask_dims(shapes, h->varying);
  for (auto it = fixed_dims_graphs_.begin(); it != fixed_dims_graphs_.end(); ++it)
    if (it->base == &base && it->masked == masked) {
      fixed_dims_graphs_.splice(fixed_dims_graphs_.begin(), fixed_dims_graphs_, it);
      const auto& bound = fixed_dims_graphs_.front().graph;
      return bound ? bound : base_graph;
    }
  auto g = std::make_shared<graph::Graph>(base);  // constants share storage
  passes::PassContext pc = pass_context();
  try {
    passes::bind_fixed_dims(*g, shapes, h->varying, pc);
  } catch (const Error&) {
    // These shapes may be wrong (the plan will say so) or a rule may need
    // a dim left symbolic: plans for this class of shapes start from the
    // base (remembered, so the binding is not tried on every plan).
    g = nullptr;
  }
  if (g) ++fixed_dims_built_;
  fixed_dims_graphs_.push_front(FixedDimsGraph{&base, std::move(masked), std::move(g)});
  if (fixed_dims_graphs_.size() > kMaxFixedDimsGraphs) fixed_dims_graphs_.pop_back();
  const auto& bound = fixed_dims_graphs_.front().graph;
  return bound ? bound : base_graph;
}

std::shared_ptr<const Plan> Engine::plan_for_inputs(const std::vector<Tensor>& inputs, const RunOptions& o) const {
  // A run at a known shape compares the inputs' shapes in place: the shapes
  // are copied (allocated) only to build a new plan.
  const auto same_shapes = [&](const std::vector<Shape>& s) {
    if (s.size() != inputs.size()) return false;
    for (size_t i = 0; i < s.size(); ++i)
      if (s[i] != inputs[i].shape()) return false;
    return true;
  };
  std::vector<Shape> shapes;
  const auto input_shapes = [&]() -> const std::vector<Shape>& {
    if (shapes.empty())
      for (const auto& t : inputs) shapes.push_back(t.shape());
    return shapes;
  };
  const Stream* s = o.stream.get();
  const bool capturing = s && s->capturing();
  // While steering inputs are few-valued their values key every plan, with
  // the shape inputs' (no plan for the shapes alone is built first: with an
  // If on a steering input, that plan would be thrown away).
  // During a capture too: the run before it (the one that set the context
  // up) used the plan its steering values key. Values on the device cannot
  // be read then (refused below).
  const bool steering = !steering_inputs_.empty() && steering_active_.load(std::memory_order_relaxed);

  std::shared_ptr<const Plan> p;
  if (!steering) {
    {
      std::lock_guard<std::mutex> lock(plans_mutex_);
      if (auto* e = find_cached_plan(plans_, [&](const PlanKey& k) { return k.keyed.empty() && same_shapes(k.shapes); }))
        p = count_hit(e->first, e->second);
    }
    if (!p) p = plan_for(input_shapes(), !capturing);
    // Shapes alone size everything (or nothing here is a shape input): done.
    if (!p->value_dependent || shape_inputs_.empty()) return p;
  }
  // A value longer than a shape can be is data, not a shape: the run goes
  // to the host evaluator (copying and comparing it every run would cost
  // more than the plan saves).
  bool data_not_shape = false;
  for (int i : shape_inputs_) data_not_shape = data_not_shape || inputs[i].numel() > passes::kMaxShapeInputElements;
  if (data_not_shape && !steering) return p;
  const std::vector<int>& keyed = !steering ? shape_inputs_ : data_not_shape ? steering_inputs_ : value_keyed_;

  // Their values, on the host (a device one is read back: the stream that
  // made it finishes first).
  std::vector<Tensor> values;
  values.reserve(keyed.size());
  for (int i : keyed) {
    const Tensor& t = inputs[i];
    if (t.device().is_cpu()) {
      values.push_back(t);
      continue;
    }
    if (capturing)
      throw Error(ErrorKind::kInvalidArgument, "input '" + inputs_[i].name + "' decides shapes, so its value is read "
                                               "when the run starts, which a graph being captured cannot do; pass "
                                               "it as a host array");
    if (o.stream) o.stream->synchronize();
    values.push_back(to_host(t));
  }
  {
    std::lock_guard<std::mutex> lock(plans_mutex_);
    if (auto* e = find_cached_plan(plans_, [&](const PlanKey& k) {
          return k.keyed == keyed && same_shapes(k.shapes) && same_values(k.values, values);
        }))
      return count_hit(e->first, e->second);
    // A new plan. Too many distinct values to specialise on (a counter),
    // whatever the shapes: steering inputs stop keying plans (their If runs
    // as control flow again: the plan as without steering), and a CPU
    // engine's shape inputs too (the host evaluator is what the CPU runs
    // anyway; a device engine always plans, as the evaluator would take the
    // whole model to the host).
    if (steering && steering_active_.load(std::memory_order_relaxed) &&
        !steering_seen_.note(steering_inputs_, values_of(steering_inputs_, keyed, values), passes::kMaxSteeringValues))
      steering_active_.store(false, std::memory_order_relaxed);
  }
  if (steering && !steering_active_.load(std::memory_order_relaxed)) return plan_for_inputs(inputs, o);
  if (!options_.device.is_accelerator()) {
    std::lock_guard<std::mutex> lock(plans_mutex_);
    if (!shape_values_seen_.note(keyed, values, std::max<size_t>(1, options_.max_cached_plans)))
      return p ? p : plan_for(input_shapes(), !capturing);
  }
  return plan_for(input_shapes(), keyed, values, !capturing);
}

std::vector<Tensor> Engine::values_of(const std::vector<int>& of, const std::vector<int>& keyed,
                                      const std::vector<Tensor>& values) {
  std::vector<Tensor> r;
  for (int i : of)
    for (size_t k = 0; k < keyed.size(); ++k)
      if (keyed[k] == i) r.push_back(values[k]);
  return r;
}

bool Engine::SeenValues::note(const std::vector<int>& keyed, const std::vector<Tensor>& values, size_t limit) {
  for (const auto& [k, v] : seen)
    if (k == keyed && same_values(v, values)) return true;
  if (seen.size() >= limit) return false;
  std::vector<Tensor> copy;
  for (const auto& t : values) copy.push_back(t.clone());
  seen.emplace_back(keyed, std::move(copy));
  return true;
}

std::shared_ptr<const graph::Graph> Engine::steered_graph(const std::vector<Tensor>& values) const {
  std::lock_guard<std::mutex> lock(steered_mutex_);
  for (const auto& [key, g] : steered_graphs_)
    if (same_values(key, values)) return g;
  auto g = std::make_shared<graph::Graph>(graph_);  // constants share storage
  for (size_t k = 0; k < steering_inputs_.size(); ++k) g->values[g->inputs[steering_inputs_[k]]].constant = values[k].clone();
  passes::PassContext pc = pass_context();
  std::vector<std::string> log;
  pc.log = &log;
  passes::run_steered_passes(*g, options_.optimize, pc);
  std::vector<Tensor> key;
  for (const auto& t : values) key.push_back(t.clone());
  steered_graphs_.emplace_back(std::move(key), g);
  return g;
}

MemoryReport Engine::memory_report(const std::vector<Shape>& shapes) const {
  std::shared_ptr<const Plan> p = plan_for(shapes);
  if (p->prefix) p = p->prefix;  // what a split plan holds; its tail's values live only while it runs
  MemoryReport r;
  r.arena_bytes = p->arena_bytes;
  r.naive_bytes = p->naive_bytes;
  r.device_arena_bytes = p->device_arena_bytes;
  r.device_naive_bytes = p->device_naive_bytes;
  r.num_steps = p->steps.size();
  r.host_steps = p->device.is_accelerator() ? p->host_steps : p->steps.size();
  r.copy_steps = p->copy_steps;
  r.in_place_steps = p->in_place_steps;
  if (constants_) r.engine_device_constant_bytes = constants_->bytes();
  std::set<const void*> seen;
  for (const auto& v : p->values)
    if (v.home == ValueHome::kConstant && seen.insert(v.constant.data()).second)
      (v.space == MemorySpace::kDevice ? r.device_constant_bytes : r.constant_bytes) += v.constant.bytes();
  return r;
}

std::vector<KernelReportRow> Engine::kernel_report(const std::vector<Shape>& shapes) const {
  return report_rows(*plan_for(shapes));
}

std::vector<KernelReportRow> Engine::kernel_report(const std::vector<Tensor>& inputs) const {
  check_inputs(inputs);
  return report_rows(*plan_for_inputs(inputs, RunOptions{}));
}

std::vector<KernelReportRow> Engine::report_rows(const Plan& plan) const {
  if (plan.value_dependent && plan.staged) {  // prefix steps, the eager nodes, the rest's plan
    std::vector<KernelReportRow> r = plan.prefix ? report_rows(*plan.prefix) : std::vector<KernelReportRow>{};
    const StagedTail& st = *plan.staged;
    const std::string dev = options_.device.is_cuda() ? "cuda" : "sim";
    for (const auto& step : st.eager) {
      const graph::Node& n = st.tail.nodes[static_cast<size_t>(step.node)];
      KernelReportRow row;
      row.node = n.name;
      row.op = n.domain.empty() ? n.op_type : n.domain + "::" + n.op_type;
      row.where = dev;
      row.kernel = step.kernel->impl_name();
      row.note = "run alone: its output's size is read back";
      for (int v : n.outputs)
        if (v >= 0) {
          row.dtype = dtype_name(st.tail.values[v].dtype);
          break;
        }
      r.push_back(std::move(row));
    }
    std::shared_ptr<const Engine> rest;
    std::vector<Shape> shapes;
    {
      std::lock_guard<std::mutex> lock(st.mutex);
      rest = st.rest_engine;
      shapes = st.last_rest_shapes;
    }
    if (rest && !shapes.empty()) {
      for (auto& row : rest->kernel_report(shapes)) r.push_back(std::move(row));
      return r;
    }
    for (const auto& n : st.rest.nodes) {  // not run yet: its shapes come from the eager nodes' outputs
      KernelReportRow row;
      row.node = n.name;
      row.op = n.domain.empty() ? n.op_type : n.domain + "::" + n.op_type;
      row.where = dev;
      row.kernel = "planned at the first run";
      row.note = "its shapes depend on the nodes run alone before it";
      r.push_back(std::move(row));
    }
    return r;
  }
  if (plan.value_dependent) {  // a split's prefix steps, then the nodes the host evaluator runs
    std::vector<KernelReportRow> r = plan.prefix ? report_rows(*plan.prefix) : std::vector<KernelReportRow>{};
    const graph::Graph& evaluated = plan.prefix ? plan.tail : plan.graph;
    for (const auto& n : evaluated.nodes) {
      KernelReportRow row;
      row.node = n.name;
      row.op = n.domain.empty() ? n.op_type : n.domain + "::" + n.op_type;
      row.where = "cpu";
      row.kernel = "cpu evaluator";
      row.note = (plan.prefix ? "after " : "") + plan.value_dependent_reason;
      if (!plan.not_staged_why.empty()) row.note += "; not on the device: " + plan.not_staged_why;
      for (int v : n.outputs)
        if (v >= 0) {
          row.dtype = dtype_name(evaluated.values[v].dtype);
          break;
        }
      r.push_back(std::move(row));
    }
    return r;
  }
  const Plan* p = &plan;
  std::vector<KernelReportRow> r;
  const std::string dev = p->device.is_cuda() ? "cuda" : p->device.is_sim() ? "sim" : "cpu";
  for (const auto& st : p->steps) {
    KernelReportRow row;
    row.node = st.node->name;
    row.op = st.node->domain.empty() ? st.node->op_type : st.node->domain + "::" + st.node->op_type;
    switch (st.kind) {
      case StepKind::kHost: row.where = "cpu"; break;
      case StepKind::kDevice: row.where = dev; break;
      case StepKind::kCopyToDevice:
      case StepKind::kCopyToHost: row.where = "copy"; break;
    }
    row.kernel = st.kernel ? st.kernel->impl_name() : step_kind_name(st.kind);
    row.note = st.note;
    for (int v : st.node->outputs)
      if (v >= 0 && v < static_cast<int>(p->values.size())) {
        row.dtype = dtype_name(p->values[v].dtype);
        break;
      }
    r.push_back(std::move(row));
  }
  return r;
}

std::string Engine::check_inputs(const std::vector<Tensor>& inputs) const {
  std::string conflict;
  if (inputs.size() != inputs_.size())
    throw Error(ErrorKind::kInvalidArgument, "expected " + std::to_string(inputs_.size()) +
                                                 " inputs, got " + std::to_string(inputs.size()));
  std::map<std::string, std::pair<int64_t, std::string>> symbols;  // symbol -> (value, where seen)
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& spec = inputs_[i];
    const Tensor& t = inputs[i];
    if (dtype_is_container(spec.dtype) || dtype_is_container(t.dtype())) {
      std::vector<DType> want{spec.dtype};
      const auto& elem = graph_.values[graph_.inputs[i]].elem_type;
      want.insert(want.end(), elem.begin(), elem.end());
      check_value_type("input '" + spec.name + "'", want, t, options_.device);
      continue;
    }
    // A device engine also takes host inputs (staged to the device).
    if (t.device() != options_.device && !t.device().is_cpu())
      throw Error(ErrorKind::kDevice, "input '" + spec.name + "' is on " + t.device().str() +
                                          " but the engine runs on " + options_.device.str());
    if (t.dtype() != spec.dtype)
      throw Error(ErrorKind::kDType, "input '" + spec.name + "' expects " + dtype_name(spec.dtype) +
                                         ", got " + dtype_name(t.dtype()));
    const Shape& s = t.shape();
    check_input_shape(spec, s);
    for (size_t d = 0; spec.has_shape && d < s.size(); ++d) {
      const Dim& dim = spec.shape[d];
      if (!dim.known() && !dim.symbol.empty()) {
        auto it = symbols.find(dim.symbol);
        if (it == symbols.end()) {
          symbols[dim.symbol] = {s[d], spec.name};
        } else if (it->second.first != s[d] && conflict.empty()) {
          conflict = "dim '" + dim.symbol + "' is " + std::to_string(it->second.first) + " in input '" +
                     it->second.second + "' but " + std::to_string(s[d]) + " in input '" + spec.name + "'";
        }
      }
    }
  }
  return conflict;
}

std::vector<Tensor> Engine::run(ExecutionContext& ctx, const std::vector<Tensor>& inputs,
                                const RunOptions& options) const {
  if (ctx.device() != options_.device)
    throw Error(ErrorKind::kInvalidArgument, "a context for " + ctx.device().str() + " given to an engine on " +
                                                 options_.device.str());
  // Inputs that disagree with a dim name the model gives several of them
  // run as onnxruntime runs them: the names are the exporter's words, the
  // shapes decide (optimum's merged decoders name attention_mask's length as
  // input_ids', which holds only without past). Should the shapes then not
  // fit, the error says which names disagreed.
  const std::string conflict = check_inputs(inputs);
  if (!conflict.empty()) {
    try {
      return run_checked(ctx, inputs, options);
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::kShape) throw e.with_note(" (the model names these dims alike, but " + conflict + ")");
      throw;
    }
  }
  return run_checked(ctx, inputs, options);
}

std::vector<Tensor> Engine::run_checked(ExecutionContext& ctx, const std::vector<Tensor>& inputs,
                                        const RunOptions& options) const {
  auto plan = plan_for_inputs(inputs, options);
  if (plan->value_dependent && plan->staged) {
    const Stream* s = options.stream ? options.stream.get() : ctx.stream().get();
    if (s && s->capturing())
      throw Error(ErrorKind::kInvalidArgument, "this run is being captured into a graph, but its shapes depend on "
                                               "values (" + plan->value_dependent_reason +
                                               "): the run reads a count back from the device");
    return run_staged(ctx, *plan, inputs, options);
  }
  if (plan->value_dependent) {
    const Stream* s = options.stream ? options.stream.get() : ctx.stream().get();
    if (s && s->capturing())
      throw Error(ErrorKind::kInvalidArgument, "this run is being captured into a graph, but its shapes depend on "
                                               "values (" + plan->value_dependent_reason +
                                               "), which only the host evaluator can run");
    if (options_.device.is_accelerator() && !options_.allow_cpu_fallback)
      throw Error(ErrorKind::kUnsupportedOp,
                  "allow_cpu_fallback=False but this run needs the CPU evaluator (" + plan->value_dependent_reason + ")");
    if (options_.device.is_accelerator()) {
      std::lock_guard<std::mutex> lock(fallback_mutex_);
      if (host_fallback_.empty())
        host_fallback_ = plan->prefix ? "part of it: the " + std::to_string(plan->tail.nodes.size()) +
                                            " nodes from " + plan->value_dependent_reason +
                                            " on; the nodes before ran on the device"
                                      : plan->value_dependent_reason;
    }
    if (plan->prefix) return run_split(ctx, *plan, inputs, options);
    if (!options_.device.is_accelerator())
      if (const HostHead* h = host_head()) return run_host_head(ctx, *h, inputs, options);
    return run_on_host(inputs, ctx.num_threads(), options);
  }
  RunOptions o = options;
  o.cuda_graphs = o.cuda_graphs && options_.cuda_graphs;
  return ctx.execute(plan, inputs, o);
}

KernelReuse* Engine::eval_kernel_reuse() const { return eval_kernel_reuse_wanted() ? &eval_kernels_ : nullptr; }

std::vector<Tensor> Engine::run_eager(const std::vector<Tensor>& inputs, int threads) const {
  return evaluate_on_host(graph_, inputs, threads);
}

std::vector<Tensor> Engine::evaluate_on_host(const graph::Graph& g, const std::vector<Tensor>& inputs,
                                             int threads) const {
  EvalOptions eo;
  eo.opset = opset_;
  eo.precision = options_.precision;
  eo.num_threads = threads;
  eo.reuse = eval_kernel_reuse();
  eval_kernels_.begin_run();
  return evaluate_graph(g, inputs, {}, eo);
}

// The host evaluator for a plan no device can run (shapes that depend on
// values): device inputs come to the host, outputs go back unless the
// caller wants them on the host.
std::vector<Tensor> Engine::run_on_host(const std::vector<Tensor>& inputs, int threads, const RunOptions& o) const {
  if (!options_.device.is_accelerator()) return run_eager(inputs, threads);
  if (o.stream) o.stream->synchronize();  // inputs produced on the caller's stream
  std::vector<Tensor> host;
  host.reserve(inputs.size());
  for (const auto& t : inputs) host.push_back(to_host(t));
  std::vector<Tensor> out = run_eager(host, threads);
  if (o.host_outputs) return out;
  for (auto& t : out)  // strings, sequences and maps are host objects: they stay
    if (!dtype_is_container(t.dtype()) && t.dtype() != DType::kString) t = to_device(t, options_.device);
  return out;
}

const HostHead* Engine::host_head() const {
  std::call_once(host_head_once_, [&] {
    if (passes::pass_enabled("TWINFER_HOST_HEAD")) host_head_ = split_host_head(graph_);
  });
  return host_head_.get();
}

std::vector<Tensor> Engine::run_host_head(ExecutionContext& ctx, const HostHead& h, const std::vector<Tensor>& inputs,
                                          const RunOptions& o) const {
  std::map<std::string, Tensor> env;  // by name: the engine's inputs, then what the two parts make
  for (size_t i = 0; i < graph_.inputs.size(); ++i) env[graph_.values[graph_.inputs[i]].name] = inputs[i];
  std::vector<Tensor> head_in;
  for (int i : h.head_engine_inputs) head_in.push_back(inputs[static_cast<size_t>(i)]);
  std::vector<Tensor> made = evaluate_on_host(h.head, head_in, ctx.num_threads());
  for (size_t k = 0; k < made.size(); ++k) env[h.head.values[h.head.outputs[k]].name] = std::move(made[k]);
  std::shared_ptr<const Engine> rest;
  {
    std::lock_guard<std::mutex> lock(h.mutex);
    if (!h.rest_engine) h.rest_engine = create_stage(h.rest, *this);
    rest = h.rest_engine;
  }
  std::vector<Tensor> rest_in;
  for (int v : h.rest.inputs) rest_in.push_back(env.at(h.rest.values[v].name));
  made = rest->run(ctx, rest_in, o);
  for (size_t k = 0; k < made.size(); ++k) env[h.rest.values[h.rest.outputs[k]].name] = std::move(made[k]);
  std::vector<Tensor> out;
  for (int v : graph_.outputs) {
    const graph::Value& val = graph_.values[v];
    auto it = env.find(val.name);
    out.push_back(it != env.end() ? it->second : val.constant);  // an output that folded
  }
  return out;
}

std::vector<Tensor> Engine::run_split(ExecutionContext& ctx, const Plan& plan, const std::vector<Tensor>& inputs,
                                      const RunOptions& o) const {
  // The prefix's outputs come to the host, where the tail reads them: one
  // wait for the device, as the whole-graph evaluator's inputs needed.
  RunOptions prefix_options = o;
  prefix_options.host_outputs = true;
  prefix_options.cuda_graphs = o.cuda_graphs && options_.cuda_graphs;
  std::vector<Tensor> mid = ctx.execute(plan.prefix, inputs, prefix_options);
  std::vector<Tensor> tail_inputs;
  tail_inputs.reserve(plan.tail_engine_inputs.size() + mid.size());
  if (options_.device.is_accelerator() && o.stream) o.stream->synchronize();  // inputs made on the caller's stream
  for (int i : plan.tail_engine_inputs) tail_inputs.push_back(to_host(inputs[static_cast<size_t>(i)]));
  for (auto& t : mid) tail_inputs.push_back(to_host(t));
  std::vector<Tensor> out = evaluate_on_host(plan.tail, tail_inputs, ctx.num_threads());
  if (!options_.device.is_accelerator() || o.host_outputs) return out;
  for (auto& t : out)
    if (!dtype_is_container(t.dtype()) && t.dtype() != DType::kString) t = to_device(t, options_.device);
  return out;
}

std::vector<Tensor> Engine::run_staged(ExecutionContext& ctx, const Plan& plan, const std::vector<Tensor>& inputs,
                                       const RunOptions& o) const {
  const StagedTail& st = *plan.staged;
  const graph::Graph& t = st.tail;
  // The prefix and the rest run on the caller's stream (or ours); the nodes
  // run alone on ours, whose order their outputs are allocated and freed in
  // (a caller's stream may be gone before they are).
  const std::shared_ptr<Stream> own = ctx.stream();
  const std::shared_ptr<Stream> caller = o.stream ? o.stream : own;
  // The tail's values by name: its inputs (engine inputs, on the device),
  // then what its stages make.
  std::map<std::string, Tensor> env;
  size_t at = 0;
  for (int i : plan.tail_engine_inputs) {
    const Tensor& in = inputs[static_cast<size_t>(i)];
    env[t.values[t.inputs[at++]].name] = in.device().is_cpu() ? to_device(in, options_.device) : in;
  }
  if (plan.prefix) {
    RunOptions po = o;
    po.host_outputs = false;
    po.cuda_graphs = o.cuda_graphs && options_.cuda_graphs;
    for (auto& m : ctx.execute(plan.prefix, inputs, po)) env[t.values[t.inputs[at++]].name] = std::move(m);
  }
  if (caller != own) {  // the prefix's work on the caller's stream comes first
    std::shared_ptr<Event> e = device_api(options_.device).create_event();
    caller->record(*e);
    own->wait(*e);
  }
  std::vector<std::vector<const Tensor*>> step_inputs;
  for (const auto& step : st.eager) {
    std::vector<const Tensor*> ins;
    for (int v : t.nodes[static_cast<size_t>(step.node)].inputs) {  // constants: the step's device copies
      auto it = v < 0 || t.values[v].is_constant() ? env.end() : env.find(t.values[v].name);
      ins.push_back(it == env.end() ? nullptr : &it->second);
    }
    step_inputs.push_back(std::move(ins));
  }
  std::vector<std::vector<Tensor>> made_alone = run_eager_stage(st, step_inputs, own, ctx.num_threads());
  std::vector<std::pair<std::string, Tensor>> alone_outputs;  // into env after: step_inputs point into it
  for (size_t i = 0; i < st.eager.size(); ++i) {
    const graph::Node& n = t.nodes[static_cast<size_t>(st.eager[i].node)];
    for (size_t k = 0; k < n.outputs.size() && k < made_alone[i].size(); ++k)
      if (n.outputs[k] >= 0) alone_outputs.emplace_back(t.values[n.outputs[k]].name, std::move(made_alone[i][k]));
  }
  for (auto& [name, tensor] : alone_outputs) env[name] = std::move(tensor);
  // Every step done before anything they read may go (a borrowed input's
  // owner reuses it once we let go): one wait for the stage, beside the
  // steps' own count read-backs.
  own->synchronize();
  if (!st.rest.nodes.empty()) {
    std::shared_ptr<const Engine> rest;
    {
      std::lock_guard<std::mutex> lock(st.mutex);
      if (!st.rest_engine) st.rest_engine = create_stage(st.rest, *this);
      rest = st.rest_engine;
    }
    std::vector<Tensor> rest_in;
    std::vector<Shape> shapes;
    for (int v : st.rest.inputs) {
      rest_in.push_back(env.at(st.rest.values[v].name));
      shapes.push_back(rest_in.back().shape());
    }
    RunOptions ro = o;
    ro.host_outputs = false;
    std::vector<Tensor> made = rest->run(ctx, rest_in, ro);
    for (size_t k = 0; k < made.size(); ++k) env[st.rest.values[st.rest.outputs[k]].name] = std::move(made[k]);
    {
      std::lock_guard<std::mutex> lock(st.mutex);
      st.last_rest_shapes = std::move(shapes);
    }
    // A later stage that went to the host is this engine's fallback too
    // (the Python layer warns once per engine).
    const std::string rest_fallback = rest->host_fallback_reason();
    if (!rest_fallback.empty()) {
      std::lock_guard<std::mutex> lock(fallback_mutex_);
      if (host_fallback_.empty()) host_fallback_ = "a later stage, after nodes run alone on the device: " + rest_fallback;
    }
  }
  std::vector<Tensor> out;
  std::set<std::string> engine_inputs;
  for (size_t k = 0; k < plan.tail_engine_inputs.size(); ++k) engine_inputs.insert(t.values[t.inputs[k]].name);
  for (int v : t.outputs) {
    const graph::Value& val = t.values[v];
    Tensor y;
    if (val.is_constant()) {  // an output that folded
      y = o.host_outputs ? val.constant : to_device(val.constant, options_.device);
    } else if (engine_inputs.count(val.name)) {  // an input returned as is: a copy, as a plan makes
      const Tensor& in = env.at(val.name);
      y = o.host_outputs ? to_host(in).clone() : to_device(to_host(in), options_.device);
    } else {
      y = env.at(val.name);
      if (o.host_outputs) y = to_host(y);
    }
    out.push_back(std::move(y));
  }
  return out;
}

std::string Engine::host_fallback_reason() const {
  std::lock_guard<std::mutex> lock(fallback_mutex_);
  return host_fallback_;
}

std::unique_ptr<ExecutionContext> Engine::create_context(int num_threads, int stream_priority,
                                                         double sm_share) const {
  return std::make_unique<ExecutionContext>(options_.device, num_threads > 0 ? num_threads : default_threads(),
                                            stream_priority == kEnginePriority ? options_.stream_priority
                                                                               : stream_priority,
                                            sm_share);
}

std::vector<Tensor> Engine::run(const std::vector<Tensor>& inputs, const RunOptions& options) const {
  std::unique_ptr<ExecutionContext> ctx;
  {
    std::lock_guard<std::mutex> lock(pool_mutex_);
    if (!pool_.empty()) {
      ctx = std::move(pool_.back());
      pool_.pop_back();
    }
  }
  if (!ctx) ctx = create_context();
  std::vector<Tensor> out;
  try {
    out = run(*ctx, inputs, options);
  } catch (...) {
    std::lock_guard<std::mutex> lock(pool_mutex_);
    pool_.push_back(std::move(ctx));
    throw;
  }
  // A run captured into the caller's graph: its outputs are views of this
  // context's buffers, which every replay of that graph writes again.
  const bool captured = options.stream && options.stream->capturing();
  std::lock_guard<std::mutex> lock(pool_mutex_);
  (captured ? captured_ : pool_).push_back(std::move(ctx));
  return out;
}

}  // namespace twinfer
