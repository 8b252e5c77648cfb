#include "runtime/staged_tail.h"

#include <algorithm>
#include <exception>
#include <set>

#include "core/device_api.h"
#include "runtime/transfer.h"

namespace twinfer {

std::shared_ptr<StagedTail> stage_tail(const graph::Graph& tail, int64_t opset, Device device, Backend placement,
                                       Precision precision, std::string* why) {
  auto st = std::make_shared<StagedTail>();
  st->tail = tail;
  const graph::Graph& t = st->tail;
  // Values the first nodes may read: the tail's inputs and constants.
  std::vector<char> ready(t.values.size(), 0);
  for (int v : t.inputs) ready[v] = 1;
  for (size_t v = 0; v < t.values.size(); ++v)
    if (t.values[v].is_constant()) ready[v] = 1;
  std::vector<char> eager(t.nodes.size(), 0);
  const Backend build = device.is_cuda() ? Backend::kCUDA : Backend::kCPU;  // the simulated device runs the CPU's
  for (size_t i = 0; i < t.nodes.size(); ++i) {
    const graph::Node& n = t.nodes[i];
    if (!std::all_of(n.inputs.begin(), n.inputs.end(), [&](int v) { return v < 0 || ready[v]; })) continue;
    std::string no;
    std::shared_ptr<const Kernel> k;
    try {
      const KernelDef* placed = select_kernel(KernelBuildInfo(t, n, opset, placement, precision), &no);
      if (!placed) {
        *why = "node '" + n.name + "' (" + n.op_type + ") has no device kernel: " + no;
        return nullptr;
      }
      const KernelDef* def =
          build == placement ? placed : select_kernel(KernelBuildInfo(t, n, opset, build, precision), &no);
      if (def) k = def->create(KernelBuildInfo(t, n, opset, build, precision));
    } catch (const Error& e) {  // a shape the kernel cannot read: the host evaluator's, as before
      *why = "node '" + n.name + "' (" + n.op_type + "): " + e.what();
      return nullptr;
    }
    if (!k || !k->dynamic_outputs()) {
      *why = "node '" + n.name + "' (" + n.op_type + ") has no device kernel that sizes its own outputs";
      return nullptr;
    }
    StagedTail::Step step{static_cast<int>(i), std::move(k), {}};
    step.constants.resize(n.inputs.size());
    for (size_t j = 0; j < n.inputs.size(); ++j)
      if (n.inputs[j] >= 0 && t.values[n.inputs[j]].is_constant())
        step.constants[j] = to_device(t.values[n.inputs[j]].constant, device);
    st->eager.push_back(std::move(step));
    eager[i] = 1;
  }
  if (st->eager.empty()) {
    *why = "no node of the tail can run first";
    return nullptr;
  }

  // The rest: the other nodes, reading the tail's inputs and the eager
  // nodes' outputs as its own inputs.
  graph::Graph r = t;
  r.nodes.clear();
  std::set<int> made;
  for (size_t i = 0; i < t.nodes.size(); ++i) {
    if (eager[i]) continue;
    r.nodes.push_back(t.nodes[i]);
    for (int o : t.nodes[i].outputs)
      if (o >= 0) made.insert(o);
  }
  std::vector<char> read(t.values.size(), 0);
  for (const auto& n : r.nodes)
    for (int v : n.inputs)
      if (v >= 0 && !made.count(v) && !t.values[v].is_constant()) read[v] = 1;
  r.inputs.clear();
  for (size_t v = 0; v < t.values.size(); ++v)
    if (read[v]) r.inputs.push_back(static_cast<int>(v));
  r.outputs.clear();
  for (int v : t.outputs)
    if (made.count(v) && std::find(r.outputs.begin(), r.outputs.end(), v) == r.outputs.end()) r.outputs.push_back(v);
  if (r.outputs.empty()) r.nodes.clear();  // nothing after the eager nodes reaches an output
  for (int v : r.inputs) {  // a value made by a node is an input here: no producer, its inferred shape kept
    r.values[v].producer = -1;
    r.values[v].constant = Tensor();
  }
  r.topo_sort();
  r.compact();
  st->rest = std::move(r);
  return st;
}

namespace {

// The step's kernel arguments: its inputs as views (its device constants for
// constant inputs), host memory refused.
KernelContext step_args(const StagedTail& staged, const StagedTail::Step& step,
                        const std::vector<const Tensor*>& inputs, int num_threads) {
  const graph::Node& n = staged.tail.nodes[static_cast<size_t>(step.node)];
  KernelContext a;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const Tensor* t = i < step.constants.size() && step.constants[i].defined() ? &step.constants[i]
                      : i < inputs.size()                                       ? inputs[i]
                                                                                : nullptr;
    if (t && t->defined() && t->bytes() && !t->device().is_accelerator())
      throw Error(ErrorKind::kRuntime, "a device step's input " + std::to_string(i) + " is in host memory", n.name,
                  n.op_type);
    a.inputs.push_back(t && t->defined() ? t->view() : TensorView{});
  }
  a.num_threads = num_threads;
  return a;
}

// Runs f, naming the step's node in an error that does not name one.
template <typename F>
auto naming(const graph::Node& n, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    if (!e.node().empty() || !e.op().empty()) throw;
    throw Error(e.kind(), e.what(), n.name, n.op_type);
  }
}

// The simulated device: the CPU kernel as a task of the stream (its device
// inputs read there, in order), then its outputs copied to the device.
std::vector<Tensor> run_on_sim(DeviceApi& api, const Kernel& kernel, const KernelContext& a,
                               const std::shared_ptr<Stream>& stream) {
  Accesses acc;
  for (const TensorView& v : a.inputs)
    if (v.data && v.bytes() && api.space_of(v.data) == MemorySpace::kDevice)
      acc.reads.push_back(MemoryRange{v.data, v.bytes()});
  auto host = std::make_shared<std::vector<Tensor>>();
  const Kernel* k = &kernel;  // the stage's kernels outlive the wait below
  KernelContext args = a;
  stream->host_task([k, args, host]() mutable { *host = k->run_dynamic(args); }, std::move(acc));
  stream->synchronize();
  std::vector<Tensor> out;
  for (const Tensor& h : *host) {
    Tensor d = Tensor::empty_on(h.dtype(), h.shape(), stream->device(), stream);
    if (h.bytes()) stream->copy(d.data(), h.data(), h.bytes());
    out.push_back(std::move(d));
  }
  stream->synchronize();  // the copies read `host`, which goes with this call
  return out;
}

}  // namespace

std::vector<std::vector<Tensor>> run_eager_stage(const StagedTail& staged,
                                                 const std::vector<std::vector<const Tensor*>>& inputs,
                                                 const std::shared_ptr<Stream>& stream, int num_threads) {
  const Device device = stream->device();
  DeviceApi& api = device_api(device);
  // The engine's device current and the stream's green context entered, as
  // for a plan's kernels (a cuda:1 engine on a thread whose device is 0).
  const std::shared_ptr<void> current = api.make_current();
  const std::shared_ptr<void> entered = stream->enter();
  const size_t steps = staged.eager.size();
  std::vector<KernelContext> args;
  for (size_t i = 0; i < steps; ++i) {
    args.push_back(step_args(staged, staged.eager[i], inputs[i], num_threads));
    args.back().stream = stream.get();
    args.back().stream_ref = stream;
    // Inputs made on other streams (another engine's outputs) are waited for.
    for (const Tensor* t : inputs[i])
      if (t && t->defined() && t->ready_event()) stream->wait(*t->ready_event());
  }
  const auto node = [&](size_t i) -> const graph::Node& {
    return staged.tail.nodes[static_cast<size_t>(staged.eager[i].node)];
  };
  // Should a step fail, the steps before it may still read their inputs:
  // the stream is waited for before the error leaves (the caller then lets
  // the inputs go).
  struct WaitOnError {
    Stream& s;
    int uncaught = std::uncaught_exceptions();
    ~WaitOnError() {
      if (std::uncaught_exceptions() <= uncaught) return;
      try {
        s.synchronize();
      } catch (...) {  // the step's own error is the one to report
      }
    }
  } wait_on_error{*stream};
  std::vector<std::vector<Tensor>> out(steps);
  const bool halves = !api.kernels_run_on_host() &&
                      std::all_of(staged.eager.begin(), staged.eager.end(),
                                  [](const StagedTail::Step& s) { return s.kernel->count_slots() > 0; });
  if (halves) {
    // Every step's counts into one buffer, one read-back for the stage (an
    // SSD head's 90 per-class NonZeros wait once, not 90 times; a single
    // step the same way), then every step's outputs.
    std::vector<int64_t> at(steps + 1, 0);
    for (size_t i = 0; i < steps; ++i) at[i + 1] = at[i] + staged.eager[i].kernel->count_slots();
    Tensor counts = Tensor::empty_on(DType::kInt32, {at[steps]}, device, stream);
    std::vector<std::shared_ptr<void>> states(steps);
    for (size_t i = 0; i < steps; ++i)
      states[i] = naming(node(i), [&] {
        return staged.eager[i].kernel->count(args[i], counts.data_as<int32_t>() + at[i]);
      });
    std::vector<int32_t> host(static_cast<size_t>(at[steps]));
    stream->copy(host.data(), counts.data(), host.size() * sizeof(int32_t));
    stream->synchronize();  // explicit (a pageable copy returns when done), and a kernel's fault raised here
    for (size_t i = 0; i < steps; ++i)
      out[i] = naming(node(i), [&] { return staged.eager[i].kernel->finish(args[i], host.data() + at[i], states[i]); });
  } else {
    for (size_t i = 0; i < steps; ++i) {
      KernelContext& a = args[i];
      const Kernel& k = *staged.eager[i].kernel;
      if (api.kernels_run_on_host()) {
        a.stream = nullptr;  // runs as host code on the worker
        a.stream_ref = nullptr;
        out[i] = naming(node(i), [&] { return run_on_sim(api, k, a, stream); });
      } else {
        out[i] = naming(node(i), [&] { return k.run_dynamic(a); });
      }
    }
  }
  // Ready when the stream gets here: a kernel may still be writing them, or
  // reading its inputs after reading its count back (NonZero's second pass;
  // the caller waits for the stream before it lets the inputs go).
  std::shared_ptr<Event> done = api.create_event();
  stream->record(*done);
  for (auto& o : out)
    for (Tensor& t : o) t.set_ready_event(done);
  return out;
}

}  // namespace twinfer
