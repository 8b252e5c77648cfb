#include "runtime/plan_builder.h"

#include <algorithm>
#include <cstdlib>

#include "graph/passes/lower_precision.h"
#include "graph/passes/widen_precision.h"
#include "graph/passes/pipeline.h"
#include "graph/passes/unroll_loops.h"
#include "core/shape_limits.h"
#include "runtime/arena_planner.h"
#include "runtime/faults.h"
#include "runtime/plan_split.h"

namespace twinfer {

namespace {

std::string signature_str(const std::vector<Shape>& shapes) {
  std::string s;
  for (const auto& sh : shapes) s += shape_str(sh);
  return s;
}

// One arena's requests: value ids (>= 0), step scratch (-(step + 1)), or
// reserved whole-run buffers (offsets returned through `reserved`).
struct ArenaRequests {
  std::vector<BufferRequest> requests;
  std::vector<int> owner;  // value id, -(step+1) for scratch, kReserved for whole-run buffers
  std::vector<size_t*> reserved_out;
  static constexpr int kReserved = INT32_MIN;

  void value(int v, size_t bytes, int first, int last) {
    requests.push_back({bytes, first, std::max(first, last)});
    owner.push_back(v);
    reserved_out.push_back(nullptr);
  }
  void scratch(int step, size_t bytes) {
    requests.push_back({bytes, step, step});
    owner.push_back(-step - 1);
    reserved_out.push_back(nullptr);
  }
  void whole_run(size_t bytes, int steps, size_t* offset) {
    requests.push_back({bytes, -1, steps});
    owner.push_back(kReserved);
    reserved_out.push_back(offset);
  }
  // Lays the arena out; writes offsets into the plan. Returns (peak, naive).
  std::pair<size_t, size_t> place(Plan& plan, size_t alignment) const {
    const ArenaLayout layout = plan_arena(requests, alignment);
    for (size_t r = 0; r < requests.size(); ++r) {
      const int id = owner[r];
      if (id == kReserved) *reserved_out[r] = layout.offsets[r];
      else if (id >= 0) plan.values[id].offset = layout.offsets[r];
      else plan.steps[-id - 1].scratch_offset = layout.offsets[r];
    }
    return {layout.arena_bytes, layout.naive_bytes};
  }
};

// A step whose output is its input's bytes under another shape, run by a
// copy kernel that does nothing when both are one block (CopyInput0Kernel
// on the CPU, the CUDA copy kernel).
bool is_view_step(const PlannedStep& st) {
  if (!st.node || !st.node->domain.empty() || st.inputs.empty() || st.outputs.size() != 1) return false;
  if (st.inputs[0] < 0 || st.outputs[0] < 0) return false;
  if (st.kind != StepKind::kHost && st.kind != StepKind::kDevice) return false;
  const std::string& op = st.node->op_type;
  return op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze";
}

// A split's prefix as a plan of its own (runtime/plan_split.h), its tail
// for the evaluator. A prefix that fails to build, or is value-dependent
// itself, leaves the whole graph to the evaluator, as before there were
// prefixes.
void plan_prefix(const PlanSource& src, const std::vector<Shape>& shapes, const std::vector<Tensor>& values,
                 GraphSplit& split, Plan* plan) {
  const PlanSource prefix_src{split.prefix, src.opset, src.options, src.constants, src.kernels};
  std::shared_ptr<const Plan> prefix;
  try {
    prefix = build_plan(prefix_src, shapes, values);
  } catch (const Error&) {
    return;
  }
  if (!prefix || prefix->value_dependent) return;
  plan->prefix = std::move(prefix);
  plan->tail = std::move(split.tail);
  plan->tail_engine_inputs = std::move(split.tail_engine_inputs);
}

}  // namespace

std::unique_ptr<Plan> build_plan(const PlanSource& src, const std::vector<Shape>& shapes,
                                 const std::vector<Tensor>& values) {
  const EngineOptions& opt = src.options;
  const Device device = opt.device;
  const bool on_device = device.is_accelerator();
  // Device kernels are built for the current device (library handles,
  // algorithm choice): make the engine's device current meanwhile.
  const std::shared_ptr<void> current = on_device ? device_api(device).make_current() : nullptr;
  auto plan = std::make_unique<Plan>();
  plan->device = device;
  graph::Graph& g = plan->graph;
  g = src.graph;  // constants share storage with the engine's graph
  // Sequences, optionals, maps and strings live only in the eager evaluator:
  // an arena cannot hold them (they own host objects, see core/tensor.h).
  // The nodes before the first that makes one are still a plan of their
  // own (a classifier before its ZipMap: its trees built once, not every
  // run), and only the rest goes to the evaluator.
  for (const auto& v : g.values)
    if (is_host_object(v)) {
      plan->value_dependent = true;
      plan->value_dependent_reason = "'" + v.name + "' is a " + type_str(v.dtype, v.elem_type);
      GraphSplit split;
      if (src.split_value_dependent && split_at_host_objects(g, &split))
        plan_prefix(src, shapes, values, split, plan.get());
      return plan;
    }
  // The inputs' shapes, and the values of those that key the plan.
  const auto bind_inputs = [&](graph::Graph& to) {
    for (size_t i = 0; i < to.inputs.size(); ++i) {
      auto& v = to.values[to.inputs[i]];
      if (!shape_fits(shapes[i]))
        throw Error(ErrorKind::kShape, "input '" + v.name + "' of shape " + shape_str(shapes[i]) +
                                           " has more elements than a tensor can hold (2^47)");
      v.has_shape = true;
      v.shape = sym_shape_from(shapes[i]);
      if (i < values.size() && values[i].defined()) v.constant = values[i];
    }
  };
  bind_inputs(g);
  passes::PassContext pc;
  pc.opset = src.opset;
  const Backend kb = placement_backend(device, opt.sim_coverage);  // the device's kernels (CPU for the host)
  pc.backend = on_device ? kb : Backend::kCPU;
  pc.on_device = on_device;
  pc.precision = opt.precision;
  passes::PlanPassOptions po;
  po.optimize = opt.optimize;
  po.blocked_layout = !on_device;
  po.rebuild = [&](graph::Graph& to) {
    to = src.graph;
    bind_inputs(to);
  };
  const passes::PlanPassResult passed = passes::run_plan_passes(g, po, pc);
  if (passed.unknown_node >= 0) {
    const graph::Node& n = g.nodes[passed.unknown_node];
    const graph::Value& v = g.values[passed.unknown_value];
    plan->value_dependent = true;
    plan->value_dependent_reason = "node '" + n.name + "' (" + n.op_type + "): shape of '" + v.name +
                                   "' depends on input values (inputs " + signature_str(shapes) + ")";
    // A Loop whose scan outputs would have known shapes unrolled: why not.
    const std::string refusal = passes::unroll_refusal(n);
    if (!refusal.empty()) plan->value_dependent_reason += "; it is not unrolled: " + refusal;
    // What comes before that node still has every shape: a plan of its own,
    // and only the rest for the host evaluator.
    GraphSplit split;
    if (src.split_value_dependent && split_at_value_dependence(g, &split))
      plan_prefix(src, shapes, values, split, plan.get());
    // On a device, the tail (the whole graph without a prefix) stage by
    // stage there when it starts with nodes that size their own outputs.
    const char* staged_env = std::getenv("TWINFER_STAGED_TAIL");  // "0": the host evaluator's, for side-by-sides
    if (on_device && src.split_value_dependent && !(staged_env && std::string(staged_env) == "0")) {
      std::string why_not;
      plan->staged = stage_tail(plan->prefix ? plan->tail : g, src.opset, device, kb, opt.precision, &why_not);
      if (!plan->staged) plan->not_staged_why = why_not;
      if (plan->staged && !plan->prefix) {
        plan->tail = g;
        plan->tail_engine_inputs.resize(g.inputs.size());
        for (size_t i = 0; i < g.inputs.size(); ++i) plan->tail_engine_inputs[i] = static_cast<int>(i);
      }
    }
    return plan;
  }

  // Shapes that folded from the model's own constants (Expand, Tile,
  // ConstantOfShape of a huge shape) are refused before any size is
  // computed from them: a product past int64 would wrap, not fail.
  for (const auto& v : g.values)
    if (v.has_shape && sym_shape_known(v.shape) && !shape_fits(sym_shape_values(v.shape))) {
      const graph::Node* n = v.producer >= 0 ? &g.nodes[v.producer] : nullptr;
      throw Error(ErrorKind::kShape,
                  "value '" + v.name + "' would have shape " + shape_str(sym_shape_values(v.shape)) +
                      ", more elements than a tensor can hold (2^47)",
                  n ? n->name : "", n ? n->op_type : "");
    }

  // 16-bit float nodes no kernel takes in their type (fp16 BatchNormalization
  // on the CPU, in a model exported after .half()) run in float32 between
  // Casts (graph/passes/widen_precision.h); a device plan's node may have
  // its kernel on either side.
  passes::widen_to_float32(g, [&](const graph::Graph& mini, const graph::Node& n) {
    std::string why;
    if (select_kernel(KernelBuildInfo(mini, n, src.opset, Backend::kCPU, opt.precision), &why)) return true;
    return on_device && select_kernel(KernelBuildInfo(mini, n, src.opset, kb, opt.precision), &why) != nullptr;
  });

  // precision="fp16" / "bf16": float32 values the device kernels can take in
  // the lower type become it (graph/passes/lower_precision.h); "fp8" runs
  // what is not an FP8 GEMM in fp16, and "int8" what calibration left in
  // float (on an H200, BERT-base's float32 attention took 35 of an int8
  // run's 47 ms), its quantization ops kept float32.
  if (on_device && (opt.precision == Precision::kFP16 || opt.precision == Precision::kBF16 ||
                    opt.precision == Precision::kFP8 || opt.precision == Precision::kINT8)) {
    passes::LowerPrecisionOptions lo;
    lo.to = opt.precision == Precision::kBF16 ? DType::kBFloat16 : DType::kFloat16;
    lo.quantized_ops_float32 = opt.precision == Precision::kINT8;
    lo.supports = [&](const graph::Graph& mini, const graph::Node& n) {
      std::string why;
      // The simulated device runs CPU kernels: they must take the type too.
      if (device.is_sim() && !select_kernel(KernelBuildInfo(mini, n, src.opset, Backend::kCPU, opt.precision), &why))
        return false;
      return select_kernel(KernelBuildInfo(mini, n, src.opset, kb, opt.precision), &why) != nullptr;
    };
    lo.convert = [&](const Tensor& t) { return src.constants->converted(t, lo.to); };
    passes::lower_precision(g, lo, pc);
  }

  // Convolution regions channels-last where the device's tensor cores want
  // NHWC (graph/passes/channels_last.h). A rewritten node must have a kernel
  // on the device and on the CPU: placement may still send it to the host,
  // and the simulated device runs the CPU's.
  auto device_and_cpu_support = [&](const graph::Graph& mini, const graph::Node& n) {
    std::string why;
    return select_kernel(KernelBuildInfo(mini, n, src.opset, kb, opt.precision), &why) != nullptr &&
           select_kernel(KernelBuildInfo(mini, n, src.opset, Backend::kCPU, opt.precision), &why) != nullptr;
  };
  if (on_device && opt.optimize && passes::channels_last_wanted(opt.precision)) {
    passes::ChannelsLastOptions co;
    co.supports = device_and_cpu_support;
    // One KRSC copy of each weight per engine, shared by the plans of every shape.
    co.to_channels_last = [&](const Tensor& t) { return src.constants->channels_last(t); };
    passes::run_channels_last(g, co, pc);
  }

  // A residual Add into the GEMM before it (graph/passes/fuse_residual.h), on
  // the same terms; before chains, which would take the Add otherwise.
  if (on_device && opt.optimize && passes::residual_fusion_wanted()) {
    passes::FuseResidualOptions ro;
    ro.supports = device_and_cpu_support;
    passes::run_fuse_residual(g, ro, pc);
  }

  // Chains of elementwise ops as one kernel each (graph/passes/fuse_elementwise.h),
  // on the same terms.
  if (on_device && opt.optimize && passes::elementwise_fusion_wanted()) {
    passes::FuseElementwiseOptions fo;
    fo.supports = device_and_cpu_support;
    passes::run_fuse_elementwise(g, fo, pc);
  }

  // Fused attention reading its operands where their copies started and
  // writing where its output's copies end (graph/passes/attention_views.h).
  if (on_device && opt.optimize && passes::attention_views_wanted()) {
    passes::AttentionViewsOptions ao;
    ao.supports = device_and_cpu_support;
    passes::run_attention_views(g, ao, pc);
  }

  // Where each node runs (device plans), with copy nodes between spaces,
  // and the device kernels built now: one that supports a node but cannot
  // be built for it sends the node back to the host, and placement runs
  // again (a device's limits must never make a loadable model fail).
  // A node's kernel: one another plan of the engine built for the same node
  // at the same types where there is one (runtime/kernel_cache.h).
  const auto make_kernel = [&](const KernelDef& def, const KernelBuildInfo& info) -> std::shared_ptr<const Kernel> {
    if (src.kernels) return src.kernels->get(def, info);
    return def.create(info);
  };
  Placement placement;
  std::vector<std::shared_ptr<const Kernel>> device_kernels;
  if (on_device) {
    PlacementOptions po2;
    po2.device = device;
    po2.opset = src.opset;
    po2.precision = opt.precision;
    po2.sim_coverage = opt.sim_coverage;
    po2.allow_cpu_fallback = opt.allow_cpu_fallback;
    po2.insert_copies = !fault_injected(Fault::kCopy, device);
    const graph::Graph unplaced = g;
    for (;;) {
      placement = place_nodes(g, po2);
      device_kernels.clear();
      device_kernels.resize(g.nodes.size());
      int failed = -1;
      std::string why;
      for (size_t s = 0; s < g.nodes.size() && failed < 0; ++s) {
        const NodePlacement& np = placement.nodes[s];
        if (np.kind != StepKind::kDevice) continue;
        try {
          device_kernels[s] =
              make_kernel(*np.kernel, KernelBuildInfo(g, g.nodes[s], src.opset, np.build_backend, opt.precision));
        } catch (const Error& e) {
          if (e.kind() != ErrorKind::kUnsupportedOp || !opt.allow_cpu_fallback) throw;
          failed = np.source;
          why = e.what();
        }
      }
      if (failed < 0) break;
      po2.forced_host[failed] = why;
      g = unplaced;
    }
  }
  auto space_of = [&](int v) { return on_device ? placement.value_space[v] : MemorySpace::kHost; };

  // Homes of values.
  plan->values.assign(g.values.size(), PlannedValue{});
  auto set_meta = [&](int v) {
    auto& pv = plan->values[v];
    pv.dtype = g.values[v].dtype;
    pv.shape = sym_shape_values(g.values[v].shape);
    pv.space = space_of(v);
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
      pv.space = space_of(static_cast<int>(v));
      pv.constant = pv.space == MemorySpace::kDevice ? src.constants->device_copy(g.values[v].constant)
                                                     : g.values[v].constant;
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
    PlannedStep st;
    st.node = &n;
    if (on_device) {
      const NodePlacement& np = placement.nodes[s];
      st.kind = np.kind;
      st.note = np.note;
      if (np.kind == StepKind::kDevice) {
        st.kernel = std::move(device_kernels[s]);
      } else if (np.kernel) {
        st.kernel = make_kernel(*np.kernel, KernelBuildInfo(g, n, src.opset, np.build_backend, opt.precision));
      }
      plan->host_steps += st.kind == StepKind::kHost;
      plan->copy_steps += st.kind == StepKind::kCopyToDevice || st.kind == StepKind::kCopyToHost;
    } else {
      KernelBuildInfo info(g, n, src.opset, Backend::kCPU, opt.precision);
      std::string why;
      const KernelDef* def = select_kernel(info, &why);
      if (!def) throw Error(ErrorKind::kUnsupportedOp, why, n.name, n.op_type);
      st.kernel = make_kernel(*def, info);
    }
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
  plan->capturable = on_device && plan->host_steps == 0;

  for (size_t v = 0; v < passed.blocked.blocked.size(); ++v)
    if (passed.blocked.blocked[v]) {
      if (plan->values[v].home != ValueHome::kArena)
        throw Error(ErrorKind::kRuntime, "blocked value '" + g.values[v].name + "' is not an intermediate");
      plan->values[v].channel_block = passed.blocked.block;
    }

  // Views: the output of a Reshape-like step (its input's bytes, see
  // is_view_step) shares its input's block when both are intermediates of
  // one arena; the block lives until the later of their last reads, and the
  // step's copy onto itself is skipped by the kernel. Steps are in order, so
  // a chain of views shares one block.
  std::vector<int> view_of(g.values.size(), -1);
  for (const auto& st : plan->steps) {
    if (!is_view_step(st)) continue;
    const int in = st.inputs[0], out = st.outputs[0];
    const auto &pi = plan->values[in], &po = plan->values[out];
    if (pi.home != ValueHome::kArena || po.home != ValueHome::kArena || pi.space != po.space ||
        pi.channel_block || po.channel_block || planned_bytes(pi) != planned_bytes(po))
      continue;
    const int root = view_of[in] >= 0 ? view_of[in] : in;
    view_of[out] = root;
    last[root] = std::max(last[root], last[out]);
  }

  // In place: a host step whose kernel may write output 0 over one of its
  // inputs (Kernel::output_may_take_input: a convolution adding its residual,
  // which it would otherwise copy into y first) gets that input's block where
  // the input is an intermediate of the same size and layout that no later
  // step reads and no other input of the step shares.
  // A block's owner: views of an output that later took its input's block
  // chain through it.
  auto root_of = [&](int v) {
    while (view_of[v] >= 0) v = view_of[v];
    return v;
  };
  for (size_t s = 0; s < plan->steps.size(); ++s) {
    const auto& st = plan->steps[s];
    if (st.kind != StepKind::kHost || !st.kernel || st.outputs.empty() || st.outputs[0] < 0) continue;
    const int k = st.kernel->output_may_take_input();
    if (k < 0 || k >= static_cast<int>(st.inputs.size()) || st.inputs[k] < 0) continue;
    const int in = st.inputs[k], out = st.outputs[0];
    const int root = root_of(in);
    const auto &pi = plan->values[in], &po = plan->values[out];
    if (view_of[out] >= 0 || last[root] != static_cast<int>(s) || pi.home != ValueHome::kArena ||
        po.home != ValueHome::kArena || pi.space != po.space || pi.space != MemorySpace::kHost ||
        pi.channel_block != po.channel_block || planned_bytes(pi) != planned_bytes(po))
      continue;
    bool shared = false;
    for (size_t j = 0; j < st.inputs.size(); ++j) {
      const int v = st.inputs[j];
      if (static_cast<int>(j) != k && v >= 0 && root_of(v) == root) shared = true;
    }
    if (shared) continue;
    view_of[out] = root;
    last[root] = std::max(last[root], last[out]);
    ++plan->in_place_steps;
  }

  // Memory: an arena per space, by liveness.
  ArenaRequests host, dev;
  for (size_t v = 0; v < g.values.size(); ++v) {
    const auto& pv = plan->values[v];
    if (pv.home != ValueHome::kArena || view_of[v] >= 0) continue;
    (pv.space == MemorySpace::kDevice ? dev : host).value(static_cast<int>(v), planned_bytes(pv), first[v], last[v]);
  }
  for (size_t s = 0; s < plan->steps.size(); ++s) {
    const auto& st = plan->steps[s];
    const size_t b = st.kernel ? st.kernel->scratch_bytes() : 0;
    if (b) (st.kind == StepKind::kDevice ? dev : host).scratch(static_cast<int>(s), b);
  }
  const int nsteps = static_cast<int>(plan->steps.size());
  if (on_device) {
    const size_t nin = g.inputs.size(), nout = g.outputs.size();
    plan->input_slots.assign(nin, 0);
    plan->input_staging.assign(nin, 0);
    plan->output_slots.assign(nout, 0);
    plan->output_staging.assign(nout, 0);
    std::vector<char> read(g.values.size(), 0);
    for (const auto& st : plan->steps)
      for (int v : st.inputs)
        if (v >= 0) read[v] = 1;
    for (int v : g.outputs) read[v] = 1;
    plan->input_unread.assign(nin, 0);
    for (size_t i = 0; i < nin; ++i) {
      const int v = g.inputs[i];
      plan->input_unread[i] = plan->values[v].home == ValueHome::kConstant || !read[v];
    }
    for (size_t i = 0; i < nin; ++i) {
      const size_t bytes = static_cast<size_t>(shape_numel(shapes[i])) * dtype_size(g.values[g.inputs[i]].dtype);
      dev.whole_run(bytes, nsteps, &plan->input_slots[i]);
      host.whole_run(bytes, nsteps, &plan->input_staging[i]);
    }
    for (size_t o = 0; o < nout; ++o) {
      const size_t bytes = static_cast<size_t>(shape_numel(plan->output_shapes[o])) * dtype_size(plan->output_dtypes[o]);
      dev.whole_run(bytes, nsteps, &plan->output_slots[o]);
      host.whole_run(bytes, nsteps, &plan->output_staging[o]);
    }
    std::tie(plan->device_arena_bytes, plan->device_naive_bytes) = dev.place(*plan, kDeviceArenaAlignment);
  }
  std::tie(plan->arena_bytes, plan->naive_bytes) = host.place(*plan, kArenaAlignment);
  for (size_t v = 0; v < g.values.size(); ++v)
    if (view_of[v] >= 0) plan->values[v].offset = plan->values[root_of(static_cast<int>(v))].offset;
  return plan;
}

}  // namespace twinfer
