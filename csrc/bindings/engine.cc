// Engine and ExecutionContext for Python: loading (GIL released while the
// model is parsed and compiled), running (GIL released while kernels run),
// and the reports the Python front end renders.
#include <pybind11/stl.h>

#include <algorithm>

#include "backends/cpu/onednn_common.h"
#include "bindings/bindings.h"
#include "bindings/tensor_convert.h"
#include "onnx/reader.h"
#include "runtime/engine.h"
#include "runtime/execution_context.h"
#include "runtime/group_graph.h"
#include "runtime/pipelined_graph.h"

namespace py = pybind11;

namespace twinfer::bindings {

namespace {

py::list shape_to_py(const SymShape& s) {
  py::list l;
  for (const auto& d : s) {
    if (d.known()) l.append(d.value);
    else if (!d.symbol.empty()) l.append(d.symbol);
    else l.append(py::none());
  }
  return l;
}

// `ids`: the specs' values in the engine's graph, whose elem_type spells out
// sequence/optional types ("sequence(float32)").
py::list specs_to_py(const Engine& e, const std::vector<IOSpec>& specs, const std::vector<int>& ids) {
  py::list l;
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto& s = specs[i];
    const std::vector<DType> none;
    const auto& elem = i < ids.size() ? e.optimized_graph().values[ids[i]].elem_type : none;
    l.append(py::make_tuple(s.name, type_str(s.dtype, elem), shape_to_py(s.shape)));
  }
  return l;
}

std::vector<Shape> shapes_from_py(const py::list& shapes) {
  std::vector<Shape> r;
  for (auto s : shapes) r.push_back(s.cast<Shape>());
  return r;
}

// Keeps a Python object alive from C++ (released with the GIL held).
std::shared_ptr<void> hold(py::object o) {
  auto* p = new py::object(std::move(o));
  return std::shared_ptr<void>(p, [](void* q) {
    py::gil_scoped_acquire gil;
    delete static_cast<py::object*>(q);
  });
}

// stream: None (the context's own), or a stream handle (an int: cudaStream_t,
// or a simulated device's stream id).
RunOptions run_options(const Engine& e, const py::object& stream, bool host_outputs) {
  RunOptions o;
  o.host_outputs = host_outputs;
  if (!stream.is_none()) {
    if (!e.device().is_accelerator())
      throw Error(ErrorKind::kInvalidArgument, "stream= is for device engines; this one runs on the CPU");
    o.stream = device_api(e.device()).borrow_stream(stream.cast<uintptr_t>());
  }
  return o;
}

std::vector<Tensor> run_engine(const Engine& e, ExecutionContext* ctx, const std::vector<Tensor>& inputs,
                               const py::object& stream, bool host_outputs) {
  RunOptions o = run_options(e, stream, host_outputs);
  py::gil_scoped_release nogil;
  return ctx ? e.run(*ctx, inputs, o) : e.run(inputs, o);
}

// outputs= of Engine.run on a device engine: host outputs for "host", and for
// "auto" when every input is on the host (NumPy in, NumPy out). False when
// it is none of the three (the general path raises).
bool host_outputs_for(const py::handle outputs, const std::vector<Tensor>& inputs, bool* host) {
  if (!PyUnicode_Check(outputs.ptr())) return false;
  const std::string mode = outputs.cast<std::string>();
  if (mode == "auto") {
    *host = std::all_of(inputs.begin(), inputs.end(), [](const Tensor& t) { return t.device().is_cpu(); });
    return true;
  }
  *host = mode == "host";
  return *host || mode == "device";
}

// Outputs as Python objects (output_to_py: a ZipMap's rows as dicts): a
// dict by `names` (a tuple), or a list when `names` is None.
py::object outputs_to_py(std::vector<Tensor>& outs, py::handle names) {
  if (names.is_none()) {
    py::list l(outs.size());
    for (size_t i = 0; i < outs.size(); ++i) l[i] = output_to_py(std::move(outs[i]));
    return std::move(l);
  }
  if (!PyTuple_CheckExact(names.ptr()) || static_cast<size_t>(PyTuple_GET_SIZE(names.ptr())) != outs.size())
    throw Error(ErrorKind::kInvalidArgument, "_run_feeds: output_names must be a tuple with one name per output");
  py::dict d;
  for (size_t i = 0; i < outs.size(); ++i)
    d[PyTuple_GET_ITEM(names.ptr(), static_cast<Py_ssize_t>(i))] = output_to_py(std::move(outs[i]));
  return std::move(d);
}

// Engine.run's per-call fast path (python/twinfer/_engine.py): the feeds
// converted here, the engine's own stream, outputs= as Engine.run takes it.
// None when the general path must run instead: a value only it converts, a
// missing or unknown name, a context or outputs= it would reject; so every
// error reads as it always did.
py::object run_feeds(const Engine& e, py::handle feeds, py::handle input_names, py::handle output_names,
                     py::handle context, py::handle outputs) {
  if (!context.is_none() && !py::isinstance<ExecutionContext>(context)) return py::none();
  std::vector<Tensor> inputs;
  if (!fast_feeds(feeds, input_names, &inputs)) return py::none();
  bool host = false;  // a CPU engine's outputs are host tensors whatever outputs= says
  if (e.device().is_accelerator() && !host_outputs_for(outputs, inputs, &host)) return py::none();
  ExecutionContext* ctx = context.is_none() ? nullptr : &context.cast<ExecutionContext&>();
  std::vector<Tensor> outs = run_engine(e, ctx, inputs, py::none(), host);
  return outputs_to_py(outs, output_names);
}

// The options of running, for a model and a saved engine alike: the device
// runtime's and the plan cache's.
void set_run_options(EngineOptions& opt, const std::string& device, bool allow_cpu_fallback, bool cuda_graphs,
                        int stream_priority, const std::string& sim_coverage, int64_t max_cached_plans,
                        bool plan_ahead) {
  if (max_cached_plans < 1)
    throw Error(ErrorKind::kInvalidArgument, "max_cached_plans must be at least 1, got " + std::to_string(max_cached_plans));
  opt.max_cached_plans = static_cast<size_t>(max_cached_plans);
  opt.plan_ahead = plan_ahead;
  opt.device = parse_device(device);
  opt.allow_cpu_fallback = allow_cpu_fallback;
  opt.cuda_graphs = cuda_graphs;
  opt.stream_priority = stream_priority;
  opt.sim_coverage = sim_coverage_from_name(sim_coverage);
}

// kernel_report's rows as (node, op, kernel, where, note, dtype) tuples.
py::list report_list(const std::vector<KernelReportRow>& rows) {
  py::list out;
  for (const auto& r : rows) out.append(py::make_tuple(r.node, r.op, r.kernel, r.where, r.note, r.dtype));
  return out;
}

}  // namespace

void bind_engine(py::module_& m) {
  // (count, bytes) of the packed weight copies kernels share (PackedWeights).
  m.def("_test_shared_packed_weights", [] { return cpu::onednn::shared_packed_copies(); });
  py::class_<ExecutionContext, std::shared_ptr<ExecutionContext>>(m, "ExecutionContext",
                               "Per-run state (arena, thread budget); use one per thread.")
      .def_property("num_threads", &ExecutionContext::num_threads, &ExecutionContext::set_num_threads)
      .def_property_readonly("arena_bytes", &ExecutionContext::arena_bytes)
      .def_property_readonly("device_arena_bytes", &ExecutionContext::device_arena_bytes)
      .def_property_readonly("stream", &ExecutionContext::stream, "The context's own stream (None on the CPU).")
      .def_property_readonly("sm_count", &ExecutionContext::sm_count,
                             "SMs its stream may use: 0 for the whole device (or the CPU), else its partition's.")
      .def("synchronize",
           [](ExecutionContext& c) {
             py::gil_scoped_release nogil;
             c.synchronize();
           },
           "Block until this context's last run has finished on the device.")
      // Without the GIL where the context's lock is taken: a run holding the
      // lock may need the GIL to release a borrowed tensor (a deadlock).
      .def("graph_stats",
           [](const ExecutionContext& c) {
             ExecutionContext::GraphStats s;
             {
               py::gil_scoped_release nogil;
               s = c.graph_stats();
             }
             py::dict d;
             d["captures"] = s.captures;
             d["replays"] = s.replays;
             d["cached"] = s.cached;
             d["kept_for_callers"] = s.kept_for_callers;
             return d;
           },
           "CUDA graphs of this context: captures, replays, graphs held, and plans kept for graphs a "
           "caller captured its runs into (until the context goes).")
      .def_property_readonly("device", [](const ExecutionContext& c) { return c.device().str(); })
      .def_property("profiling", &ExecutionContext::profiling,
                    [](ExecutionContext& c, bool on) {
                      py::gil_scoped_release nogil;
                      c.set_profiling(on);
                    },
                    "Time every step of the runs in this context (resets the times).")
      .def("step_times",
           [](const ExecutionContext& c) {
             std::vector<ExecutionContext::StepTime> times;
             {
               py::gil_scoped_release nogil;
               times = c.step_times();
             }
             py::list out;
             for (const auto& t : times) out.append(py::make_tuple(t.node, t.op, t.impl, t.total_ms, t.runs));
             return out;
           },
           "(node, op, kernel, total ms, runs) per step of the plan run last.");

  py::class_<Engine, std::shared_ptr<Engine>>(m, "Engine")
      .def_property_readonly("inputs",
                             [](const Engine& e) { return specs_to_py(e, e.inputs(), e.optimized_graph().inputs); })
      .def_property_readonly("outputs",
                             [](const Engine& e) { return specs_to_py(e, e.outputs(), e.optimized_graph().outputs); })
      .def_property_readonly("_input_defaults",
                             [](const Engine& e) {
                               py::dict d;
                               for (const auto& [name, t] : e.input_defaults()) d[py::str(name)] = py::cast(t);
                               return d;
                             })
      .def_property_readonly("_rank_unknown",
                             [](const Engine& e) {
                               // Inputs and outputs declared without a shape: their
                               // spec's () means any rank, not a scalar.
                               std::vector<std::string> names;
                               for (const auto* specs : {&e.inputs(), &e.outputs()})
                                 for (const auto& s : *specs)
                                   if (!s.has_shape) names.push_back(s.name);
                               return names;
                             })
      .def_property_readonly("folded_overridable",
                             [](const Engine& e) { return specs_to_py(e, e.folded_overridable(), {}); })
      .def_property_readonly("device", [](const Engine& e) { return e.device().str(); })
      .def_property_readonly("precision", [](const Engine& e) { return std::string(precision_name(e.precision())); })
      .def_property_readonly("num_threads", &Engine::default_threads)
      .def("run",
           [](const Engine& e, const std::vector<Tensor>& inputs, py::object stream, bool host_outputs) {
             return run_engine(e, nullptr, inputs, stream, host_outputs);
           },
           py::arg("inputs"), py::arg("stream") = py::none(), py::arg("host_outputs") = false)
      .def("run_in",
           [](const Engine& e, ExecutionContext& ctx, const std::vector<Tensor>& inputs, py::object stream,
              bool host_outputs) { return run_engine(e, &ctx, inputs, stream, host_outputs); },
           py::arg("context"), py::arg("inputs"), py::arg("stream") = py::none(), py::arg("host_outputs") = false)
      .def("_run_feeds", &run_feeds, py::arg("feeds"), py::arg("input_names"), py::arg("output_names"),
           py::arg("context") = py::none(), py::arg("outputs") = "auto",
           "Engine.run's fast path: {name: NumPy array or Tensor} in input_names' order, outputs as a dict by "
           "output_names (a list when None); None when the general path must convert the feeds.")
      .def("create_context",
           [](const Engine& e, py::object threads, py::object priority, py::object sm_share) {
             // Checked here, not by pybind11's overload matching: a failed match
             // of this keep_alive<0, 1> binding crashed the interpreter.
             auto whole = [](const py::object& o, const char* what) {
               if (PyBool_Check(o.ptr()) || !PyLong_Check(o.ptr()))
                 throw Error(ErrorKind::kInvalidArgument, std::string(what) + " must be a whole number, got " +
                                                              std::string(py::repr(o)));
               return o.cast<int>();
             };
             if (!sm_share.is_none() && (PyBool_Check(sm_share.ptr()) ||
                                         !(PyFloat_Check(sm_share.ptr()) || PyLong_Check(sm_share.ptr()))))
               throw Error(ErrorKind::kInvalidArgument, "sm_share must be a number, got " + std::string(py::repr(sm_share)));
             return std::shared_ptr<ExecutionContext>(
                 e.create_context(whole(threads, "num_threads"),
                                  priority.is_none() ? Engine::kEnginePriority : whole(priority, "priority"),
                                  sm_share.is_none() ? 0.0 : sm_share.cast<double>()));
           },
           py::arg("num_threads") = 0, py::arg("priority") = py::none(), py::arg("sm_share") = py::none(),
           py::keep_alive<0, 1>())
      .def_property_readonly("host_fallback_reason", &Engine::host_fallback_reason,
                             "Why a device engine ran a plan through the host evaluator ('' if it never did).")
      .def_property_readonly("options",
                             [](const Engine& e) {
                               const auto& o = e.options();
                               py::dict d;
                               d["allow_cpu_fallback"] = o.allow_cpu_fallback;
                               d["cuda_graphs"] = o.cuda_graphs;
                               d["stream_priority"] = o.stream_priority;
                               d["sim_coverage"] = sim_coverage_name(o.sim_coverage);
                               d["max_cached_plans"] = o.max_cached_plans;
                               d["plan_ahead"] = o.plan_ahead;
                               return d;
                             })
      .def(
          "_wait_plans_ahead",
          [](const Engine& e) {
            py::gil_scoped_release nogil;
            e.wait_plans_ahead();
          },
          "Until no plan is being built ahead of a run (tests).")
      .def("stats",
           [](const Engine& e) {
             EngineStats s = e.stats();
             py::dict d;
             d["nodes_in_model"] = s.nodes_in_model;
             d["nodes_optimized"] = s.nodes_optimized;
             d["plans_cached"] = s.plans_cached;
             d["plan_hits"] = s.plan_hits;
             d["plan_misses"] = s.plan_misses;
             d["passes"] = s.pass_log;
             d["shape_inputs"] = s.shape_inputs;
             d["steering_inputs"] = s.steering_inputs;
             d["steering_active"] = s.steering_active;
             d["steered_graphs"] = s.steered_graphs;
             d["fixed_dims_graphs"] = s.fixed_dims_graphs;
             d["plans_ahead"] = s.plans_ahead;
             d["plans_ahead_used"] = s.plans_ahead_used;
             d["plans_building"] = s.plans_building;
             d["kernels_built"] = s.kernels_built;
             d["kernels_reused"] = s.kernels_reused;
             d["kernels_any_size"] = s.kernels_any_size;
             d["eval_kernels_built"] = s.eval_kernels_built;
             d["eval_kernels_reused"] = s.eval_kernels_reused;
             d["eval_kernels_held"] = s.eval_kernels_held;
             d["host_head_nodes"] = s.host_head_nodes;
             d["host_head_rest_nodes"] = s.host_head_rest_nodes;
             d["host_head_rest_kernels_built"] = s.host_head_rest_kernels_built;
             return d;
           })
      .def("memory_report",
           [](const Engine& e, const py::list& shapes) {
             std::vector<Shape> sh = shapes_from_py(shapes);
             MemoryReport r;
             {
               py::gil_scoped_release nogil;
               r = e.memory_report(sh);
             }
             py::dict d;
             d["arena_bytes"] = r.arena_bytes;
             d["naive_bytes"] = r.naive_bytes;
             d["constant_bytes"] = r.constant_bytes;
             d["device_arena_bytes"] = r.device_arena_bytes;
             d["device_naive_bytes"] = r.device_naive_bytes;
             d["device_constant_bytes"] = r.device_constant_bytes;
             d["engine_device_constant_bytes"] = r.engine_device_constant_bytes;
             d["steps"] = r.num_steps;
             d["host_steps"] = r.host_steps;
             d["copy_steps"] = r.copy_steps;
             d["in_place_steps"] = r.in_place_steps;
             return d;
           })
      .def("kernel_report",
           [](const Engine& e, const py::list& shapes) {
             std::vector<Shape> sh = shapes_from_py(shapes);
             std::vector<KernelReportRow> rows;
             {
               py::gil_scoped_release nogil;
               rows = e.kernel_report(sh);
             }
             return report_list(rows);
           })
      .def("kernel_report_for",
           [](const Engine& e, const std::vector<Tensor>& inputs) {
             std::vector<KernelReportRow> rows;
             {
               py::gil_scoped_release nogil;
               rows = e.kernel_report(inputs);
             }
             return report_list(rows);
           })
      .def(
          "save",
          [](const Engine& e, const std::string& path, std::map<std::string, std::string> metadata) {
            py::gil_scoped_release nogil;
            e.save(path, metadata);
          },
          py::arg("path"), py::arg("metadata") = std::map<std::string, std::string>{},
          "Write the optimised engine to `path` (a twinfer engine file).")
      .def("_test_step_inputs",
           [](const Engine& e, const py::list& shapes) {
             // For tests of plan-time rewrites: per step of the plan for
             // `shapes`, its op and per input (shape, whether a constant), None
             // for an omitted one.
             const std::vector<Shape> sh = shapes_from_py(shapes);
             std::shared_ptr<const Plan> p;
             {
               py::gil_scoped_release nogil;
               p = e.plan_for(sh);
             }
             py::list out;
             for (const auto& st : p->steps) {
               py::list ins;
               for (int v : st.inputs) {
                 if (v < 0) {
                   ins.append(py::none());
                   continue;
                 }
                 const PlannedValue& pv = p->values[v];
                 ins.append(py::make_tuple(std::vector<int64_t>(pv.shape.begin(), pv.shape.end()),
                                           pv.home == ValueHome::kConstant));
               }
               const graph::Node& n = *st.node;
               out.append(py::make_tuple(n.domain.empty() ? n.op_type : n.domain + "::" + n.op_type, ins));
             }
             return out;
           })
      .def("op_histogram", [](const Engine& e) {
        std::map<std::string, int> h;
        for (const auto& n : e.optimized_graph().nodes)
          ++h[n.domain.empty() ? n.op_type : n.domain + "::" + n.op_type];
        return h;
      });

  m.def("is_engine_file", &is_engine_file, py::arg("path"), "True when `path` starts like a twinfer engine file.");
  m.def(
      "load_engine",
      [](const std::string& path, const std::string& device, int num_threads, bool allow_cpu_fallback,
         bool cuda_graphs, int stream_priority, const std::string& sim_coverage, int64_t max_cached_plans,
         bool plan_ahead) {
        EngineOptions opt;
        set_run_options(opt, device, allow_cpu_fallback, cuda_graphs, stream_priority, sim_coverage, max_cached_plans,
                        plan_ahead);
        opt.num_threads = num_threads;
        SavedEngineInfo info;
        std::shared_ptr<Engine> e;
        {
          py::gil_scoped_release nogil;
          e = Engine::create_saved(read_engine_file(path, &info), info, opt);
        }
        return py::make_tuple(e, info.metadata);
      },
      py::arg("path"), py::arg("device") = "cpu", py::arg("num_threads") = 0, py::arg("allow_cpu_fallback") = true,
      py::arg("cuda_graphs") = true, py::arg("stream_priority") = 0, py::arg("sim_coverage") = "all",
      py::arg("max_cached_plans") = 16, py::arg("plan_ahead") = true,
      "(Engine, metadata) from a saved engine file: no load-time pass runs.");

  m.def(
      "load_model",
      [](py::object source, bool is_path, const std::string& device, const std::string& precision,
         int num_threads, bool optimize, const std::string& base_dir, std::vector<std::string> extra_outputs,
         std::map<std::string, float> int8_amax, std::set<std::string> keep_float, bool int8_weights, std::set<std::string> int8_unsigned,
         std::map<std::string, std::vector<float>> int8_channel_mean, bool allow_cpu_fallback, bool cuda_graphs,
         int stream_priority, const std::string& sim_coverage,
         std::map<std::string, std::pair<std::vector<float>, float>> int8_smoothing,
         std::set<std::string> int8_per_token, int64_t max_cached_plans, bool plan_ahead,
         std::vector<std::string> override_initializers, bool override_all_initializers) {
        EngineOptions opt;
        opt.override_initializers = std::move(override_initializers);
        opt.override_all_initializers = override_all_initializers;
        opt.int8_smoothing = std::move(int8_smoothing);
        opt.int8_per_token = std::move(int8_per_token);
        set_run_options(opt, device, allow_cpu_fallback, cuda_graphs, stream_priority, sim_coverage, max_cached_plans,
                        plan_ahead);
        opt.int8_channel_mean = std::move(int8_channel_mean);
        opt.int8_unsigned = std::move(int8_unsigned);
        opt.int8_weights = int8_weights;
        opt.extra_outputs = std::move(extra_outputs);
        opt.int8_amax = std::move(int8_amax);
        opt.keep_float = std::move(keep_float);
        opt.precision = precision_from_name(precision);
        opt.num_threads = num_threads;
        opt.optimize = optimize;
        if (is_path) {
          std::string path = source.cast<std::string>();
          py::gil_scoped_release nogil;
          return Engine::create(onnx::read_model_file(path), opt);
        }
        py::bytes b = source.cast<py::bytes>();
        char* data = nullptr;
        py::ssize_t size = 0;
        PyBytes_AsStringAndSize(b.ptr(), &data, &size);
        std::shared_ptr<void> keep = hold(b);
        py::gil_scoped_release nogil;
        return Engine::create(onnx::read_model_bytes(data, static_cast<size_t>(size), keep, base_dir), opt);
      },
      py::arg("source"), py::arg("is_path"), py::arg("device") = "cpu", py::arg("precision") = "fp32",
      py::arg("num_threads") = 0, py::arg("optimize") = true, py::arg("base_dir") = "",
      py::arg("extra_outputs") = std::vector<std::string>{}, py::arg("int8_amax") = std::map<std::string, float>{},
      py::arg("keep_float") = std::set<std::string>{}, py::arg("int8_weights") = false,
      py::arg("int8_unsigned") = std::set<std::string>{},
      py::arg("int8_channel_mean") = std::map<std::string, std::vector<float>>{},
      py::arg("allow_cpu_fallback") = true, py::arg("cuda_graphs") = true, py::arg("stream_priority") = 0,
      py::arg("sim_coverage") = "all",
      py::arg("int8_smoothing") = std::map<std::string, std::pair<std::vector<float>, float>>{},
      py::arg("int8_per_token") = std::set<std::string>{}, py::arg("max_cached_plans") = 16,
      py::arg("plan_ahead") = true, py::arg("override_initializers") = std::vector<std::string>{},
      py::arg("override_all_initializers") = false);

  py::class_<GroupGraph, std::shared_ptr<GroupGraph>>(
      m, "GroupGraph", "Engines' runs captured as one graph across their contexts' streams (Parallel/Pipeline).")
      .def(py::init([](const std::vector<std::tuple<std::shared_ptr<Engine>, std::shared_ptr<ExecutionContext>,
                                                    std::vector<std::pair<int, int>>>>& members,
                       size_t num_inputs) {
             std::vector<GroupMember> ms;
             for (const auto& [e, c, src] : members) ms.push_back(GroupMember{e, c, src});
             return std::make_shared<GroupGraph>(std::move(ms), num_inputs);
           }),
           py::arg("members"), py::arg("num_inputs"),
           "members: (engine, context, [(source member or -1, index) per input]).")
      .def("run",
           [](GroupGraph& g, const std::vector<Tensor>& inputs, bool host_outputs) {
             py::gil_scoped_release nogil;
             return g.run(inputs, host_outputs);
           },
           py::arg("inputs"), py::arg("host_outputs") = false)
      .def("stats",
           [](const GroupGraph& g) {
             GroupGraph::Stats s;
             {
               // Its lock is held across a whole run, which may need the GIL
               // (a DLPack owner released): never wait for it holding the GIL.
               py::gil_scoped_release nogil;
               s = g.stats();
             }
             py::dict d;
             d["captures"] = s.captures;
             d["replays"] = s.replays;
             d["graphs"] = s.graphs;
             d["nodes"] = s.nodes;
             return d;
           })
      .def_property_readonly("device", [](const GroupGraph& g) { return g.device().str(); })
      .def_property_readonly("stream", &GroupGraph::stream,
                             "The group's stream: graphs launch there; inputs are read in its order.");

  py::class_<PipelinedGraph, std::shared_ptr<PipelinedGraph>>(
      m, "PipelinedGraph",
      "A Pipeline's stages captured so that one launch runs stage s of item j - s (GraphedPipeline.map).")
      .def(py::init([](const std::vector<std::tuple<std::shared_ptr<Engine>, std::shared_ptr<ExecutionContext>,
                                                    std::vector<std::pair<int, int>>>>& stages,
                       size_t num_inputs) {
             std::vector<GroupMember> ms;
             for (const auto& [e, c, src] : stages) ms.push_back(GroupMember{e, c, src});
             return std::make_shared<PipelinedGraph>(std::move(ms), num_inputs);
           }),
           py::arg("stages"), py::arg("num_inputs"),
           "stages: (engine, context, [(source stage or -1, index) per input]).")
      .def("push",
           [](PipelinedGraph& g, const std::vector<Tensor>& inputs, bool host_outputs) {
             py::gil_scoped_release nogil;
             return g.push(inputs, host_outputs);
           },
           py::arg("inputs"), py::arg("host_outputs") = false,
           "One item in; the last stage's outputs of the items finished meanwhile, oldest first.")
      .def("drain",
           [](PipelinedGraph& g) {
             py::gil_scoped_release nogil;
             return g.drain();
           },
           "Finishes every item in flight; their outputs, oldest first.")
      .def("take_finished",
           [](PipelinedGraph& g) {
             py::gil_scoped_release nogil;
             return g.take_finished();
           },
           "After push or drain raised: the outputs of the items finished before the error.")
      .def("reset",
           [](PipelinedGraph& g) {
             py::gil_scoped_release nogil;
             g.reset();
           },
           "Forgets the items in flight (after the launched work is done).")
      .def("stats",
           [](const PipelinedGraph& g) {
             PipelinedGraph::Stats s;
             {
               py::gil_scoped_release nogil;  // as GroupGraph.stats
               s = g.stats();
             }
             py::dict d;
             d["captures"] = s.captures;
             d["launches"] = s.launches;
             d["eager"] = s.eager;
             d["graphs"] = s.graphs;
             d["in_flight"] = s.in_flight;
             d["nodes"] = s.nodes;
             return d;
           })
      .def_property_readonly("device", [](const PipelinedGraph& g) { return g.device().str(); })
      .def_property_readonly("stream", &PipelinedGraph::stream,
                             "The pipeline's stream: graphs launch there; inputs are read in its order.");
}

}  // namespace twinfer::bindings
