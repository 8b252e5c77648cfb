#include "runtime/engine.h"

#include <omp.h>

#include <algorithm>
#include <map>
#include <set>

#include "graph/domains.h"
#include "graph/passes/pipeline.h"
#include "ops/schema.h"
#include "runtime/arena_planner.h"
#include "runtime/evaluate.h"
#include "graph/subgraph.h"
#include "runtime/execution_context.h"

namespace twinfer {

namespace {

constexpr int64_t kMinOpset = 1;
constexpr int64_t kMaxOpset = 28;

void collect_unsupported(const graph::Graph& g, Backend backend,
                         std::map<std::string, std::vector<std::string>>* missing) {
  for (const auto& n : g.nodes) {
    const bool known = find_schema(n.domain, n.op_type) && any_kernel_for(n.domain, n.op_type, backend);
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

void check_opsets(const graph::Model& m) {
  std::vector<std::string> bad;
  const int64_t v = m.opset("");
  if (v == 0) bad.push_back("the model imports no default-domain (ai.onnx) opset");
  else if (v < kMinOpset || v > kMaxOpset)
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
    if (t.device() != device)
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

}  // namespace

std::shared_ptr<Engine> Engine::create(graph::Model model, const EngineOptions& options) {
  std::shared_ptr<Engine> e(new Engine());
  e->options_ = options;
  if (options.device.is_cuda())
    throw Error(ErrorKind::kDevice, "the CUDA backend has no kernels in this build yet; use device='cpu'");
  if (options.precision == Precision::kINT8 && options.int8_amax.empty())
    throw Error(ErrorKind::kInvalidArgument,
                "precision 'int8' needs calibrated activation ranges (twinfer.load(..., precision='int8', "
                "calibration=data))");
  if (options.precision != Precision::kFP32 && options.precision != Precision::kINT8)
    throw Error(ErrorKind::kInvalidArgument,
                std::string("precision '") + precision_name(options.precision) +
                    "' is not supported on the CPU backend (it computes in fp32)");
  check_opsets(model);
  e->opset_ = model.opset("");
  e->opsets_ = model.opsets;
  e->backing_ = model.backing;
  e->nodes_in_model_ = model.graph.nodes.size();

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

  graph::Graph& g = model.graph;
  graph::capture_implicit_inputs(g);  // subgraph reads of outer values become node inputs
  for (const auto& name : options.extra_outputs) {
    const int id = g.find_value(name);
    if (id < 0 || (g.values[id].producer < 0 && !g.values[id].is_constant() &&
                   std::find(g.inputs.begin(), g.inputs.end(), id) == g.inputs.end()))
      throw Error(ErrorKind::kInvalidArgument, "extra output '" + name + "' is not a value of the model's graph");
    g.outputs.push_back(id);
  }
  passes::PassContext pc;
  pc.opset = e->opset_;
  pc.backend = Backend::kCPU;
  pc.precision = options.precision;
  pc.log = &e->pass_log_;
  passes::LoadPassOptions lo;
  lo.optimize = options.optimize;
  lo.int8 = {options.int8_amax, options.int8_unsigned, options.int8_channel_mean, options.keep_float};
  lo.int8_weights = options.int8_weights;
  passes::run_load_passes(g, lo, pc);

  e->finish(std::move(g));
  return e;
}

std::shared_ptr<Engine> Engine::create_saved(graph::Model model, const SavedEngineInfo& info,
                                             const EngineOptions& options) {
  std::shared_ptr<Engine> e(new Engine());
  e->options_ = options;
  e->options_.precision = info.precision;
  e->options_.optimize = info.optimize;
  if (options.device.is_cuda())
    throw Error(ErrorKind::kDevice, "the CUDA backend has no kernels in this build yet; use device='cpu'");
  check_opsets(model);
  e->opset_ = model.opset("");
  e->opsets_ = model.opsets;
  e->backing_ = model.backing;
  e->nodes_in_model_ = info.nodes_in_model;
  e->pass_log_ = info.pass_log;
  // The file names ops by name: one this build lacks (a newer twinfer's
  // fused op) is reported like any unsupported op.
  std::map<std::string, std::vector<std::string>> missing;
  collect_unsupported(model.graph, Backend::kCPU, &missing);
  if (!missing.empty()) {
    std::string msg = "the saved engine uses ops this twinfer does not have: ";
    for (const auto& kv : missing) msg += kv.first + " ";
    throw Error(ErrorKind::kUnsupportedOp, msg + "(load the ONNX model again)");
  }
  e->finish(std::move(model.graph));
  return e;
}

void Engine::finish(graph::Graph g) {
  for (int v : g.inputs) inputs_.push_back({g.values[v].name, g.values[v].dtype, g.values[v].shape});
  for (int v : g.outputs) {
    const auto& val = g.values[v];
    if (val.dtype == DType::kUndefined)
      throw Error(ErrorKind::kModelFormat, "the type of graph output '" + val.name + "' is unknown");
    outputs_.push_back({val.name, val.dtype, val.has_shape ? val.shape : SymShape{}});
  }
  graph_ = std::move(g);

  // Fully static models get their plan now: errors surface at load and the
  // first run pays nothing extra.
  bool all_static = true;
  std::vector<Shape> shapes;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    // An input declared without a shape has an unknown rank, not rank 0.
    const auto& in = inputs_[i];
    all_static &= graph_.values[graph_.inputs[i]].has_shape && sym_shape_known(in.shape);
    if (all_static) shapes.push_back(sym_shape_values(in.shape));
  }
  if (all_static) plan_for(shapes);
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
  return s;
}

std::shared_ptr<const Plan> Engine::plan_for(const std::vector<Shape>& shapes) const {
  std::lock_guard<std::mutex> lock(plans_mutex_);
  for (auto it = plans_.begin(); it != plans_.end(); ++it) {
    if (it->first == shapes) {
      ++plan_hits_;
      if (it != plans_.begin()) plans_.splice(plans_.begin(), plans_, it);
      return plans_.front().second;
    }
  }
  ++plan_misses_;
  std::shared_ptr<const Plan> p = build_plan(shapes);
  plans_.emplace_front(shapes, p);
  while (plans_.size() > std::max<size_t>(1, options_.max_cached_plans)) plans_.pop_back();
  return p;
}

std::unique_ptr<Plan> Engine::build_plan(const std::vector<Shape>& shapes) const {
  auto plan = std::make_unique<Plan>();
  graph::Graph& g = plan->graph;
  g = graph_;  // constants share storage with the engine's graph
  // Sequences and optionals live only in the eager evaluator: they have no
  // bytes an arena could hold (see core/tensor.h).
  for (const auto& v : g.values)
    if (dtype_is_container(v.dtype)) {
      plan->value_dependent = true;
      plan->value_dependent_reason = "'" + v.name + "' is a " + type_str(v.dtype, v.elem_type);
      return plan;
    }
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    auto& v = g.values[g.inputs[i]];
    v.has_shape = true;
    v.shape = sym_shape_from(shapes[i]);
  }
  passes::PassContext pc;
  pc.opset = opset_;
  pc.backend = Backend::kCPU;
  pc.precision = options_.precision;
  passes::PlanPassOptions po;
  po.optimize = options_.optimize;
  const passes::PlanPassResult passed = passes::run_plan_passes(g, po, pc);
  const passes::BlockedLayout& blocked = passed.blocked;
  if (passed.unknown_node >= 0) {
    const graph::Node& n = g.nodes[passed.unknown_node];
    const graph::Value& v = g.values[passed.unknown_value];
    if (options_.device.type != DeviceType::kCPU)
      throw Error(ErrorKind::kUnsupportedOp,
                  "output '" + v.name + "' has a shape that depends on input values (inputs " +
                      signature_str(shapes) + "); the " + options_.device.str() +
                      " backend needs shapes known from input shapes",
                  n.name, n.op_type);
    plan->value_dependent = true;
    plan->value_dependent_reason =
        "node '" + n.name + "' (" + n.op_type + "): shape of '" + v.name + "' depends on input values";
    return plan;
  }

  // Homes of values.
  plan->values.assign(g.values.size(), PlannedValue{});
  auto set_meta = [&](int v) {
    auto& pv = plan->values[v];
    pv.dtype = g.values[v].dtype;
    pv.shape = sym_shape_values(g.values[v].shape);
  };
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    int v = g.inputs[i];
    set_meta(v);
    plan->values[v].home = ValueHome::kInput;
    plan->values[v].io_index = static_cast<int>(i);
  }
  for (size_t v = 0; v < g.values.size(); ++v)
    if (g.values[v].is_constant()) {
      auto& pv = plan->values[v];
      pv.home = ValueHome::kConstant;
      pv.constant = g.values[v].constant;
      pv.dtype = pv.constant.dtype();
      pv.shape = pv.constant.shape();
    }
  for (size_t o = 0; o < g.outputs.size(); ++o) {
    int v = g.outputs[o];
    const auto& val = g.values[v];
    if (!val.has_shape || !sym_shape_known(val.shape))
      throw Error(ErrorKind::kShape, "shape of output '" + val.name + "' could not be inferred");
    plan->output_shapes.push_back(sym_shape_values(val.shape));
    plan->output_dtypes.push_back(val.dtype);
    if (val.producer >= 0 && plan->values[v].home == ValueHome::kUnused) {
      set_meta(v);
      plan->values[v].home = ValueHome::kOutput;
      plan->values[v].io_index = static_cast<int>(o);
    }
  }

  // Kernels, and lifetimes of intermediates.
  std::vector<int> first(g.values.size(), -1), last(g.values.size(), -1);
  for (size_t s = 0; s < g.nodes.size(); ++s) {
    const auto& n = g.nodes[s];
    KernelBuildInfo info(g, n, opset_, Backend::kCPU, options_.precision);
    std::string why;
    const KernelDef* def = select_kernel(info, &why);
    if (!def) throw Error(ErrorKind::kUnsupportedOp, why, n.name, n.op_type);
    PlannedStep st;
    st.node = &n;
    st.kernel = def->create(info);
    st.inputs = n.inputs;
    st.outputs = n.outputs;
    for (int in : n.inputs)
      if (in >= 0) last[in] = static_cast<int>(s);
    for (int o : n.outputs)
      if (o >= 0) {
        first[o] = static_cast<int>(s);
        if (last[o] < 0) last[o] = static_cast<int>(s);
        if (plan->values[o].home == ValueHome::kUnused) {
          set_meta(o);
          plan->values[o].home = ValueHome::kArena;
        }
      }
    plan->steps.push_back(std::move(st));
  }

  for (size_t v = 0; v < blocked.blocked.size(); ++v)
    if (blocked.blocked[v]) {
      if (plan->values[v].home != ValueHome::kArena)
        throw Error(ErrorKind::kRuntime, "blocked value '" + g.values[v].name + "' is not an intermediate");
      plan->values[v].channel_block = blocked.block;
    }

  std::vector<BufferRequest> requests;
  std::vector<int> request_value;  // value id, or -(step+1) for a step's scratch
  for (size_t v = 0; v < g.values.size(); ++v) {
    if (plan->values[v].home != ValueHome::kArena) continue;
    const auto& pv = plan->values[v];
    requests.push_back({planned_bytes(pv), first[v], std::max(first[v], last[v])});
    request_value.push_back(static_cast<int>(v));
  }
  for (size_t s = 0; s < plan->steps.size(); ++s) {
    size_t b = plan->steps[s].kernel->scratch_bytes();
    if (!b) continue;
    requests.push_back({b, static_cast<int>(s), static_cast<int>(s)});
    request_value.push_back(-static_cast<int>(s) - 1);
  }
  ArenaLayout layout = plan_arena(requests);
  for (size_t r = 0; r < requests.size(); ++r) {
    int id = request_value[r];
    if (id >= 0) plan->values[id].offset = layout.offsets[r];
    else plan->steps[-id - 1].scratch_offset = layout.offsets[r];
  }
  plan->arena_bytes = layout.arena_bytes;
  plan->naive_bytes = layout.naive_bytes;
  return plan;
}

MemoryReport Engine::memory_report(const std::vector<Shape>& shapes) const {
  auto p = plan_for(shapes);
  MemoryReport r;
  r.arena_bytes = p->arena_bytes;
  r.naive_bytes = p->naive_bytes;
  r.num_steps = p->steps.size();
  std::set<const void*> seen;
  for (const auto& v : p->values)
    if (v.home == ValueHome::kConstant && seen.insert(v.constant.data()).second) r.constant_bytes += v.constant.bytes();
  return r;
}

std::vector<std::array<std::string, 3>> Engine::kernel_report(const std::vector<Shape>& shapes) const {
  auto p = plan_for(shapes);
  std::vector<std::array<std::string, 3>> r;
  for (const auto& st : p->steps) {
    std::string op = st.node->domain.empty() ? st.node->op_type : st.node->domain + "::" + st.node->op_type;
    r.push_back({st.node->name, op, st.kernel->impl_name()});
  }
  return r;
}

void Engine::check_inputs(const std::vector<Tensor>& inputs) const {
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
    if (t.device() != options_.device)
      throw Error(ErrorKind::kDevice, "input '" + spec.name + "' is on " + t.device().str() +
                                          " but the engine runs on " + options_.device.str());
    if (t.dtype() != spec.dtype)
      throw Error(ErrorKind::kDType, "input '" + spec.name + "' expects " + dtype_name(spec.dtype) +
                                         ", got " + dtype_name(t.dtype()));
    const Shape& s = t.shape();
    if (s.size() != spec.shape.size())
      throw Error(ErrorKind::kShape, "input '" + spec.name + "' expects rank " + std::to_string(spec.shape.size()) +
                                         " " + sym_shape_str(spec.shape) + ", got " + shape_str(s));
    for (size_t d = 0; d < s.size(); ++d) {
      const Dim& dim = spec.shape[d];
      if (dim.known() && dim.value != s[d])
        throw Error(ErrorKind::kShape, "input '" + spec.name + "' expects shape " + sym_shape_str(spec.shape) +
                                           ", got " + shape_str(s) + " (dim " + std::to_string(d) + ")");
      if (!dim.known() && !dim.symbol.empty()) {
        auto it = symbols.find(dim.symbol);
        if (it == symbols.end()) {
          symbols[dim.symbol] = {s[d], spec.name};
        } else if (it->second.first != s[d]) {
          throw Error(ErrorKind::kShape, "dim '" + dim.symbol + "' is " + std::to_string(it->second.first) +
                                             " in input '" + it->second.second + "' but " +
                                             std::to_string(s[d]) + " in input '" + spec.name + "'");
        }
      }
    }
  }
}

std::vector<Tensor> Engine::run(ExecutionContext& ctx, const std::vector<Tensor>& inputs) const {
  check_inputs(inputs);
  std::vector<Shape> shapes;
  shapes.reserve(inputs.size());
  for (const auto& t : inputs) shapes.push_back(t.shape());
  auto plan = plan_for(shapes);
  if (plan->value_dependent) return run_eager(inputs, ctx.num_threads());
  return ctx.execute(plan, inputs);
}

std::vector<Tensor> Engine::run_eager(const std::vector<Tensor>& inputs, int threads) const {
  EvalOptions eo;
  eo.opset = opset_;
  eo.precision = options_.precision;
  eo.num_threads = threads;
  return evaluate_graph(graph_, inputs, {}, eo);
}

std::vector<Tensor> Engine::run(const std::vector<Tensor>& inputs) const {
  std::unique_ptr<ExecutionContext> ctx;
  {
    std::lock_guard<std::mutex> lock(pool_mutex_);
    if (!pool_.empty()) {
      ctx = std::move(pool_.back());
      pool_.pop_back();
    }
  }
  if (!ctx) ctx = std::make_unique<ExecutionContext>(options_.device, default_threads());
  std::vector<Tensor> out;
  try {
    out = run(*ctx, inputs);
  } catch (...) {
    std::lock_guard<std::mutex> lock(pool_mutex_);
    pool_.push_back(std::move(ctx));
    throw;
  }
  std::lock_guard<std::mutex> lock(pool_mutex_);
  pool_.push_back(std::move(ctx));
  return out;
}

}  // namespace twinfer
