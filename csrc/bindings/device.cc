// Devices and streams for Python: parsing device names, streams (for
// run(stream=...) and the tests), the simulated device's knobs, and the
// host side of the device index math (tests/test_index_math.py).
#include <pybind11/stl.h>

#include "backends/sim/sim_device.h"
#include "bindings/bindings.h"
#include "core/device_api.h"
#include "core/host_memory.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/elementwise/broadcast_offsets.h"
#include "ops/elementwise/launch_config.h"
#include "ops/nn/colmajor_gemm.h"
#include "runtime/faults.h"

namespace py = pybind11;

namespace twinfer::bindings {

Device parse_device(const std::string& s) {
  auto indexed = [&](const char* prefix) -> bool {
    const std::string p(prefix);
    return s == p || s.rfind(p + ":", 0) == 0;
  };
  auto index_of = [&](size_t skip) {
    if (s.size() <= skip) return 0;
    try {
      size_t used = 0;
      const int i = std::stoi(s.substr(skip + 1), &used);
      if (used == s.size() - skip - 1 && i >= 0) return i;
    } catch (const std::exception&) {
    }
    throw Error(ErrorKind::kInvalidArgument, "unknown device '" + s + "' (expected 'cpu', 'cuda', 'cuda:N' or 'sim')");
  };
  if (s == "cpu") return Device::cpu();
  if (indexed("cuda")) return Device::cuda(index_of(4));
  if (indexed("sim")) return Device::sim(index_of(3));
  throw Error(ErrorKind::kInvalidArgument, "unknown device '" + s + "' (expected 'cpu', 'cuda', 'cuda:N' or 'sim')");
}

void bind_device(py::module_& m) {
  // Declared first: Stream.end_capture returns a Graph, Graph.launch takes a Stream.
  py::class_<GraphExec> graph(m, "Graph", "A stream's captured work (Stream.end_capture), replayed by launch().");

  py::class_<Event, std::shared_ptr<Event>>(m, "Event",
                                            "A point in a stream's work (create_event; Stream.record / wait).")
      .def("synchronize",
           [](Event& e) {
             py::gil_scoped_release nogil;
             e.synchronize();
           },
           "Block until the recorded point is reached.")
      .def_property_readonly("ready", &Event::ready)
      .def_property_readonly("captured", &Event::captured, "Last recorded inside a graph capture.")
      .def_property_readonly("timed", &Event::timed);

  py::class_<Stream, std::shared_ptr<Stream>>(m, "Stream", "A device stream (twinfer's own or a caller's).")
      .def_property_readonly("handle", &Stream::handle,
                             "cudaStream_t as an int (what run(stream=...) and DLPack take); an id on 'sim'.")
      .def_property_readonly("priority", &Stream::priority)
      .def_property_readonly("sm_count", &Stream::sm_count,
                             "SMs its kernels may use: 0 for the whole device, else its green context's.")
      .def_property_readonly("device", [](const Stream& s) { return s.device().str(); })
      .def("record", [](Stream& s, Event& e) { s.record(e); }, py::arg("event"),
           "Record `event` here: it marks the work enqueued so far.")
      .def("wait", [](Stream& s, Event& e) { s.wait(e); }, py::arg("event"),
           "Later work on this stream waits for `event`.")
      .def("wait_for",
           [](Stream& s, const Tensor& t) {
             if (t.ready_event()) wait_across_capture(s, *t.ready_event());
           },
           py::arg("tensor"), "Later work on this stream waits until a device tensor has been written.")
      .def("synchronize",
           [](Stream& s) {
             py::gil_scoped_release nogil;
             s.synchronize();
           },
           "Block until the work enqueued so far has finished (raises a device task's error).")
      .def("begin_capture", &Stream::begin_capture,
           "Record this thread's work on the stream instead of running it (CUDA graph capture, thread-local "
           "mode). Engine runs on the stream during a capture allocate nothing: warm each context up first.")
      .def("end_capture", &Stream::end_capture, "End the capture: the recorded work as a Graph.")
      .def_property_readonly("capturing", &Stream::capturing)
      .def_property_readonly(
          "trace_key", [](Stream& s) { return device_api(s.device()).trace_stream_key(s); },
          "What stop_kernel_trace names this stream's kernels with (0 where unknown).")
      .def("__repr__", [](const Stream& s) {
        return "twinfer.Stream(device=" + s.device().str() + ", handle=" + std::to_string(s.handle()) +
               ", priority=" + std::to_string(s.priority()) + ")";
      });

  graph
      .def("launch", [](GraphExec& g, Stream& s) { g.launch(s); }, py::arg("stream"),
           "Enqueue the captured work on `stream`.")
      .def_property_readonly("num_nodes", &GraphExec::num_nodes);

  m.def("create_stream",
        [](const std::string& device, int priority) { return device_api(parse_device(device)).create_stream(priority); },
        py::arg("device"), py::arg("priority") = 0);
  m.def("create_event",
        [](const std::string& device, bool timing) {
          DeviceApi& api = device_api(parse_device(device));
          return timing ? api.create_timing_event() : api.create_event();
        },
        py::arg("device"), py::arg("timing") = false);
  m.def("elapsed_ms",
        [](const std::string& device, Event& start, Event& end) {
          return device_api(parse_device(device)).elapsed_ms(start, end);
        },
        py::arg("device"), py::arg("start"), py::arg("end"),
        "Milliseconds between two timing events (both reached), on any streams of the device.");
  m.def("device_sm_count", [](const std::string& device) { return device_api(parse_device(device)).sm_count(); },
        py::arg("device"), "SMs of the whole device (the simulated device reports an H100's 132).");
  m.def("stream_priority_range",
        [](const std::string& device) { return device_api(parse_device(device)).priority_range(); },
        py::arg("device"), "(least, greatest): numerically lower is more urgent.");
  m.def("device_synchronize",
        [](const std::string& device) {
          Device d = parse_device(device);
          py::gil_scoped_release nogil;
          device_api(d).synchronize();
        },
        py::arg("device"));
  m.def("host_bytes_available", &host_bytes_available,
        "Host memory a large allocation is checked against (MemAvailable + SwapFree, capped by the cgroup).");
  m.def("parse_device", [](const std::string& s) { return parse_device(s).str(); }, py::arg("device"));
  // Kernel spans for concurrency profiles (core/kernel_trace.h).
  m.def("start_kernel_trace", [](const std::string& device) { device_api(parse_device(device)).start_kernel_trace(); },
        py::arg("device"), "Collect every kernel's span on the device (CUPTI on CUDA); DeviceError where it cannot.");
  m.def("stop_kernel_trace",
        [](const std::string& device) {
          Device d = parse_device(device);
          std::vector<KernelSpan> spans;
          {
            py::gil_scoped_release nogil;
            spans = device_api(d).stop_kernel_trace();
          }
          py::list out;
          for (const KernelSpan& k : spans) out.append(py::make_tuple(k.name, k.stream, k.start_ns, k.end_ns));
          return out;
        },
        py::arg("device"), "Stop tracing: [(kernel name, stream key, start ns, end ns)] of the finished kernels.");
  m.def("kernel_trace_clock_ns", [](const std::string& device) { return device_api(parse_device(device)).trace_clock_ns(); },
        py::arg("device"), "The trace clock now (the spans' time base), in ns.");

  m.def("sim_config", [] {
    const sim::SimConfig c = sim::sim_config();
    py::dict d;
    d["max_delay_us"] = c.max_delay_us;
    d["seed"] = c.seed;
    d["check_order"] = c.check_order;
    d["memory_limit"] = c.memory_limit;
    d["compute_capability"] = c.compute_capability;
    return d;
  });
  m.def("set_sim_config",
        [](int max_delay_us, uint64_t seed, bool check_order, uint64_t memory_limit, int compute_capability) {
          if (compute_capability < 10 || compute_capability > 199)
            throw Error(ErrorKind::kInvalidArgument, "compute_capability is major*10+minor (e.g. 80, 90), got " +
                                                         std::to_string(compute_capability));
          sim::set_sim_config(sim::SimConfig{max_delay_us, seed, check_order, memory_limit, compute_capability});
        },
        py::arg("max_delay_us"), py::arg("seed"), py::arg("check_order"), py::arg("memory_limit"),
        py::arg("compute_capability") = 90);

  m.def("injected_faults", &injected_faults);
  m.def("set_injected_faults", &set_injected_faults, py::arg("names"));

  // Host side of the device index math, against NumPy in the tests.
  m.def("_test_fast_divmod",
        [](const std::vector<uint64_t>& divisors, const std::vector<uint64_t>& numerators) {
          std::vector<std::pair<uint64_t, uint64_t>> out;
          out.reserve(divisors.size());
          for (size_t i = 0; i < divisors.size() && i < numerators.size(); ++i) {
            ew::FastDivmod f(divisors[i]);
            uint64_t q = 0, r = 0;
            f.divmod(numerators[i], q, r);
            out.emplace_back(q, r);
          }
          return out;
        });
  m.def("_test_colmajor_gemm", [](int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b) {
    const nn::ColMajorGemm g = nn::colmajor_gemm(M, N, K, trans_a, trans_b);
    auto op = [](const nn::ColMajorOperand& o) { return py::make_tuple(o.trans, o.rows, o.cols, o.ld); };
    return py::make_tuple(g.m, g.n, g.k, op(g.x), op(g.w), g.ld_d);
  });
  m.def("_test_launch_configs", [](const std::vector<int64_t>& sizes) {
    std::vector<std::tuple<int64_t, uint32_t, uint32_t>> out;
    for (int64_t n : sizes) {
      const auto c = ew::elementwise_launch(n);
      out.emplace_back(n, c.threads, c.blocks);
    }
    return out;
  });
  m.def("_test_broadcast_offsets",
        [](const std::vector<Shape>& inputs, const Shape& out, const std::vector<uint64_t>& linear) {
          const ew::BroadcastPlan p = ew::make_broadcast_plan(inputs, out);
          const auto calc = ew::offset_calc_for<ew::kMaxBroadcastInputs>(p);
          std::vector<std::vector<int64_t>> offsets;
          offsets.reserve(linear.size());
          for (uint64_t i : linear) {
            int64_t o[ew::kMaxBroadcastInputs];
            calc.get(i, o);
            offsets.emplace_back(o, o + inputs.size());
          }
          return py::make_tuple(calc.rank, offsets);
        });
}

}  // namespace twinfer::bindings
