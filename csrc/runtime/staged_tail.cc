#include "runtime/staged_tail.h"

#include <algorithm>
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
      if (!select_kernel(KernelBuildInfo(t, n, opset, placement, precision), &no)) {
        *why = "node '" + n.name + "' (" + n.op_type + ") has no device kernel: " + no;
        return nullptr;
      }
      const KernelDef* def = select_kernel(KernelBuildInfo(t, n, opset, build, precision), &no);
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

std::vector<Tensor> run_eager_step(const StagedTail& staged, const StagedTail::Step& step,
                                   const std::vector<const Tensor*>& inputs, const std::shared_ptr<Stream>& stream,
                                   int num_threads) {
  const graph::Node& n = staged.tail.nodes[static_cast<size_t>(step.node)];
  const Device device = stream->device();
  DeviceApi& api = device_api(device);
  // The engine's device current and the stream's green context entered, as
  // for a plan's kernels (a cuda:1 engine on a thread whose device is 0).
  const std::shared_ptr<void> current = api.make_current();
  const std::shared_ptr<void> entered = stream->enter();
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
  // Inputs made on other streams (another engine's outputs) are waited for.
  for (const Tensor* t : inputs)
    if (t && t->defined() && t->ready_event()) stream->wait(*t->ready_event());
  std::vector<Tensor> out;
  try {
    if (!api.kernels_run_on_host()) {
      a.stream = stream.get();
      a.stream_ref = stream;
      out = step.kernel->run_dynamic(a);
    } else {
      // The simulated device: the CPU kernel as a task of the stream (its
      // device inputs read there, in order), then its outputs to the device.
      Accesses acc;
      for (const TensorView& v : a.inputs)
        if (v.data && v.bytes() && api.space_of(v.data) == MemorySpace::kDevice)
          acc.reads.push_back(MemoryRange{v.data, v.bytes()});
      auto host = std::make_shared<std::vector<Tensor>>();
      std::shared_ptr<const Kernel> k = step.kernel;
      stream->host_task([k, a, host]() mutable { *host = k->run_dynamic(a); }, std::move(acc));
      stream->synchronize();
      for (const Tensor& h : *host) {
        Tensor d = Tensor::empty_on(h.dtype(), h.shape(), device, stream);
        if (h.bytes()) stream->copy(d.data(), h.data(), h.bytes());
        out.push_back(std::move(d));
      }
      stream->synchronize();  // the copies read `host`, which goes with this call
    }
  } catch (const Error& e) {
    if (!e.node().empty() || !e.op().empty()) throw;
    throw Error(e.kind(), e.what(), n.name, n.op_type);
  }
  // Ready when the stream gets here: a kernel may still be writing them, or
  // reading its inputs after reading its count back (NonZero's second pass;
  // the caller waits for the stream before it lets the inputs go).
  std::shared_ptr<Event> done = api.create_event();
  stream->record(*done);
  for (Tensor& t : out) t.set_ready_event(done);
  return out;
}

}  // namespace twinfer
