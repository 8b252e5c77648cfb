// Running a device plan: inputs staged into the device arena, steps enqueued
// on one stream (host steps wait for it first), outputs with a ready event,
// and after a plan's first run a captured graph replayed instead.
//
// Ordering, which the simulated device checks on every access:
//   - a run waits for its device inputs' ready events, and for the
//     context's previous run when that ran on another stream (the arenas are
//     shared between runs);
//   - a host step waits for the stream when device work was enqueued since
//     the host last waited (its inputs arrive by copies in flight, and the
//     bytes it overwrites may still be read by one);
//   - host inputs go through page-locked staging, which the host overwrites
//     only after the previous run's staging copies finished;
//   - outputs are allocated in the order of the context's own stream (and
//     freed there later); a caller's stream waits for the allocations and
//     the free waits for the caller's stream.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "runtime/arena_planner.h"
#include "runtime/execution_context.h"
#include "runtime/faults.h"

namespace twinfer {

namespace {
constexpr size_t kMaxGraphs = 16;  // per context; the least recently used goes

MemoryRange range_of(const TensorView& v) { return MemoryRange{v.data, v.data ? v.bytes() : 0}; }
}  // namespace

ExecutionContext::~ExecutionContext() {
  if (!api_) return;
  // The device may still use the arenas: wait before they go. A destructor
  // cannot throw, and an error here belongs to a run nobody waited for.
  try {
    synchronize();
  } catch (...) {
  }
  graphs_.clear();
  // Its SM share, if any, is free for other contexts now, whatever output
  // of it still holds the stream (to free its memory in stream order).
  stream_->release_sm_share();
}

void ExecutionContext::synchronize() {
  std::lock_guard<std::recursive_mutex> lock(use_mutex_);
  if (!api_ || !ran_) return;
  host_wait(*done_);  // a run captured into a caller's graph has nothing to wait for here
  check_kernel_errors();
  // Inputs of finished runs go back to their owners now, not at the next run
  // (an idle pooled context would hold a caller's tensors indefinitely).
  release_finished_inputs();
}

void ExecutionContext::order_before(Stream& s) {
  std::lock_guard<std::recursive_mutex> lock(use_mutex_);
  if (api_ && ran_) wait_across_capture(s, *done_);
}

void ExecutionContext::order_after(Stream& s, std::shared_ptr<Event> done) {
  std::lock_guard<std::recursive_mutex> lock(use_mutex_);
  if (!api_) return;
  done_ = std::move(done);
  last_stream_ = s.handle();
  ran_ = true;
}

ExecutionContext::GraphStats ExecutionContext::graph_stats() const {
  std::lock_guard<std::recursive_mutex> lock(use_mutex_);
  GraphStats s = gstats_;
  s.cached = 0;
  for (const auto& g : graphs_) s.cached += g->exec != nullptr;
  s.kept_for_callers = held_for_caller_graphs_.size();
  return s;
}

ExecutionContext::GraphEntry* ExecutionContext::graph_for(const std::shared_ptr<const Plan>& plan, const void* arena) {
  for (auto& g : graphs_)
    if (g->plan == plan && g->arena == arena) return g.get();
  if (graphs_.size() >= kMaxGraphs) {
    auto lru = std::min_element(graphs_.begin(), graphs_.end(),
                                [](const auto& a, const auto& b) { return a->last_use < b->last_use; });
    graphs_.erase(lru);
  }
  graphs_.push_back(std::make_unique<GraphEntry>());
  graphs_.back()->plan = plan;
  graphs_.back()->arena = arena;
  return graphs_.back().get();
}

void ExecutionContext::enqueue_steps(const Plan& plan, Stream& s, char* device_arena, char* host_arena) {
  const bool sim = api_->kernels_run_on_host();
  const bool skip_sync = fault_injected(Fault::kHostSync, device_);
  bool pending = true;  // device work the host has not waited for (at least the inputs' copies)
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const PlannedStep& st = plan.steps[i];
    KernelContext& a = step_args_[i];
    for (size_t k = 0; k < st.inputs.size(); ++k) a.inputs[k].data = st.inputs[k] < 0 ? nullptr : value_ptrs_[st.inputs[k]];
    for (size_t k = 0; k < st.outputs.size(); ++k)
      a.outputs[k].data = st.outputs[k] < 0 ? nullptr : value_ptrs_[st.outputs[k]];
    a.num_threads = num_threads_;
    a.stream = &s;
    a.backend_state = error_flag_.get();
    a.scratch = (st.kind == StepKind::kDevice ? device_arena : host_arena) + st.scratch_offset;
    const auto t0 = std::chrono::steady_clock::now();
    switch (st.kind) {
      case StepKind::kCopyToDevice:
      case StepKind::kCopyToHost:
        s.copy(a.outputs[0].data, a.inputs[0].data, a.inputs[0].bytes());
        pending = true;
        break;
      case StepKind::kDevice:
        if (sim) {
          // The simulated device runs the CPU kernel on the stream's worker.
          // A device kernel touches only device memory.
          Accesses acc;
          for (const auto* views : {&a.inputs, &a.outputs})
            for (const TensorView& v : *views) {
              if (!v.data || !v.bytes()) continue;
              if (api_->space_of(v.data) != MemorySpace::kDevice)
                throw Error(ErrorKind::kRuntime,
                            std::string("simulated device: the device kernel reads or writes ") +
                                memory_space_name(api_->space_of(v.data)) + " memory (a copy is missing)",
                            st.node->name, st.node->op_type);
              (views == &a.inputs ? acc.reads : acc.writes).push_back(range_of(v));
            }
          // A recorded launch (a capture) may run long after this plan
          // leaves the cache: it holds the kernel and the error flag.
          std::shared_ptr<const Kernel> k = st.kernel;
          std::shared_ptr<void> flag = error_flag_;
          const std::string node = st.node->name, op = st.node->op_type;
          KernelContext args = a;
          args.stream = nullptr;  // runs as host code on the worker
          DeviceApi* api = api_;
          s.host_task(
              [k, flag, args, node, op, api]() mutable {
                try {
                  const uint64_t t0 = api->trace_clock_ns();
                  k->run(args);
                  api->note_host_kernel(node, op, t0, api->trace_clock_ns());
                } catch (const Error& e) {
                  if (!e.node().empty() || !e.op().empty()) throw;
                  throw Error(e.kind(), e.what(), node, op);
                } catch (const std::exception& e) {
                  throw Error(ErrorKind::kRuntime, e.what(), node, op);
                }
              },
              std::move(acc));
        } else {
          run_kernel(plan, i, a);  // enqueues on s (timed below when profiling)
        }
        pending = true;
        break;
      case StepKind::kHost:
        if (pending && !skip_sync) {
          s.synchronize();
          check_kernel_errors();
          pending = false;
        }
        try {
          for (const TensorView& v : a.inputs) api_->host_access(range_of(v), false, "a host kernel's input");
          for (const TensorView& v : a.outputs) api_->host_access(range_of(v), true, "a host kernel's output");
        } catch (const Error& e) {
          throw Error(e.kind(), e.what(), st.node->name, st.node->op_type);
        }
        run_step(plan, i, a);
        break;
    }
    if (profiling_ && st.kind != StepKind::kHost) {
      // Device work is asynchronous: time a step by waiting for it.
      s.synchronize();
      step_ms_[i] += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      ++step_runs_[i];
    }
  }
}

void ExecutionContext::release_finished_inputs() {
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    if (!it->done->ready()) {
      ++it;
      continue;
    }
    it = in_flight_.erase(it);  // releases the inputs (a borrowed tensor goes back to its owner)
  }
}

std::shared_ptr<Event> ExecutionContext::free_event() {
  for (const auto& e : events_)
    if (e.use_count() == 1) return e;
  events_.push_back(api_->create_event());
  return events_.back();
}

std::vector<Tensor> ExecutionContext::execute_device(const std::shared_ptr<const Plan>& pp,
                                                     const std::vector<Tensor>& inputs, const RunOptions& ro) {
  const std::shared_ptr<void> current = api_->make_current();  // cuda:N is the calling thread's device meanwhile
  // Our own stream given by handle (a Parallel member's) is our own object:
  // it knows its green context.
  Stream& S = ro.stream && ro.stream->handle() != stream_->handle() ? *ro.stream : *stream_;
  const std::shared_ptr<void> entered = S.enter();  // a green context's stream: that context, meanwhile
  // A caller capturing a graph on S (torch.cuda.graph, or a Parallel or
  // Pipeline captured whole, whose members' streams joined the capture): we
  // add our work to it, allocating nothing and synchronising nothing;
  // outputs are views of the context's buffers, as a captured graph's are.
  const bool outer_capture = S.capturing();
  if (outer_capture && (prepared_for_ != pp || !device_arena_ || device_arena_->bytes() < pp->device_arena_bytes))
    throw Error(ErrorKind::kInvalidArgument,
                "this run is being captured into a graph, which cannot set up buffers: run the engine once at "
                "these shapes in this context before capturing (a run without context= takes a pooled context, "
                "and one a caller's graph holds is not handed out again: pass context= to capture one context "
                "more than once)");
  prepare(pp);
  const Plan& plan = *pp;
  if (!outer_capture) release_finished_inputs();  // (querying events inside a capture is not allowed)
  bool fresh_arena = false;
  if (!device_arena_ || device_arena_->bytes() < plan.device_arena_bytes) {
    fresh_arena = true;
    graphs_.clear();  // they point into the old arena
    if (device_arena_) synchronize();
    device_arena_.reset();
    // In the context stream's order, so giving back the old one is a
    // stream-ordered free, not cudaFree's wait for the whole device (which
    // would stall every other stream, a torch model's included).
    device_arena_ = Storage::allocate_on(api_->allocator(), std::max<size_t>(plan.device_arena_bytes, 256), stream_);
  }
  char* darena = static_cast<char*>(device_arena_->data());
  char* harena = static_cast<char*>(arena_->data());
  const bool own = !ro.stream || ro.stream->handle() == stream_->handle();
  const bool skip_waits = fault_injected(Fault::kEventWait, device_);
  if (fresh_arena && !own) {  // allocated in stream_'s order: a run elsewhere waits for that
    stream_->record(*alloc_done_);
    S.wait(*alloc_done_);
  }
  const bool skip_sync = fault_injected(Fault::kHostSync, device_);
  const bool stale_graph = fault_injected(Fault::kGraphInput, device_);
  if (outer_capture && (ro.host_outputs || plan.host_steps))
    throw Error(ErrorKind::kInvalidArgument,
                "this run is being captured into a graph on the caller's stream, which cannot hold host " +
                    std::string(plan.host_steps ? "steps (nodes without a device kernel)" : "outputs") +
                    "; ask for device outputs (outputs='device')");

  bool enqueued = false;
  try {
    // The arenas are this context's: a run on another stream waits for the
    // last. (Across a capture's boundary the caller orders them: a capture
    // begins after a synchronisation, a graph's launches are in its stream.)
    if (ran_ && last_stream_ != S.handle() && !skip_waits) {
      wait_across_capture(S, *done_);
      enqueued = true;
    }

    GraphEntry* ge = nullptr;
    bool replay = false, capture = false;
    if (ro.cuda_graphs && plan.capturable && !profiling_ && !outer_capture) {
      ge = graph_for(pp, darena);
      ge->last_use = ++run_counter_;
      replay = ge->exec != nullptr;
      // The first run at a shape warms up (lazy library setup stays out of
      // the graph); a plan whose capture failed once runs without one.
      capture = !replay && ge->runs >= 1 && !ge->failed;
      ++ge->runs;
    }
    const bool graph_mode = replay || capture;
    // Outputs go to the plan's output slots when a graph writes them, they
    // are copied to the host anyway, or nothing may be allocated; otherwise
    // straight into fresh tensors.
    const bool use_slots = graph_mode || ro.host_outputs || outer_capture;

    // Inputs.
    std::vector<std::shared_ptr<Storage>> device_inputs;
    bool staged = false;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Tensor& t = inputs[i];
      const int v = plan.graph.inputs[i];
      // A value that picked this plan (a shape or steering input): nothing
      // reads the caller's copy, a capture included.
      if (plan.input_unread[i]) continue;
      char* slot = darena + plan.input_slots[i];
      const size_t bytes = t.bytes();
      if (t.device() == device_) {
        if (t.ready_event() && !skip_waits) wait_across_capture(S, *t.ready_event());
        // Read in place only at the arena's alignment: the plan chose its
        // kernels (cuDNN graphs, cuBLASLt algorithms, vector loads) for
        // values the arena places, and a caller's slice may start anywhere.
        const bool aligned = reinterpret_cast<uintptr_t>(t.data()) % kDeviceArenaAlignment == 0;
        if (graph_mode || !aligned) {
          if (!(replay && stale_graph)) S.copy(slot, t.data(), bytes);
          value_ptrs_[v] = slot;
        } else {
          value_ptrs_[v] = t.data();
        }
        if (t.storage()) device_inputs.push_back(t.storage());
      } else {
        if (outer_capture)
          throw Error(ErrorKind::kInvalidArgument, "input '" + plan.graph.values[v].name +
                                                       "' is host memory, which a graph captured on the caller's "
                                                       "stream cannot read; pass a device tensor");
        // Host memory: through page-locked staging, so the copy is asynchronous.
        if (!staged && staging_pending_ && !skip_sync) staging_done_->synchronize();
        char* st = harena + plan.input_staging[i];
        api_->host_access({st, bytes}, true, "staging an input");
        if (bytes) std::memcpy(st, t.data(), bytes);
        if (!(replay && stale_graph)) S.copy(slot, st, bytes);
        value_ptrs_[v] = slot;
        staged = true;
      }
      enqueued = true;
    }
    if (staged) {
      S.record(*staging_done_);
      staging_pending_ = true;
    }

    // Every other value's address; outputs into fresh tensors or slots.
    std::vector<Tensor> outputs(plan.output_shapes.size());
    bool allocated = false;
    for (size_t v = 0; v < plan.values.size(); ++v) {
      const auto& pv = plan.values[v];
      switch (pv.home) {
        case ValueHome::kArena:
          value_ptrs_[v] = (pv.space == MemorySpace::kDevice ? darena : harena) + pv.offset;
          break;
        case ValueHome::kConstant: value_ptrs_[v] = pv.constant.data(); break;
        case ValueHome::kOutput:
          if (use_slots) {
            value_ptrs_[v] = darena + plan.output_slots[pv.io_index];
          } else {
            outputs[pv.io_index] = Tensor::empty_on(pv.dtype, pv.shape, device_, stream_);
            value_ptrs_[v] = outputs[pv.io_index].data();
            allocated = true;
          }
          break;
        case ValueHome::kInput:
        case ValueHome::kUnused: break;
      }
    }
    // Outputs no step writes into a tensor of their own (an input or a
    // constant passed through, a value listed twice, outputs in slots) are
    // copied out of wherever the value is; during a caller's capture they
    // stay views of the context's buffers.
    std::vector<std::pair<size_t, const void*>> copy_out;
    if (!ro.host_outputs)
      for (size_t o = 0; o < outputs.size(); ++o) {
        if (outputs[o].defined()) continue;
        const int v = plan.graph.outputs[o];
        if (outer_capture && plan.values[v].home == ValueHome::kOutput) {
          outputs[o] = Tensor::from_storage(device_arena_, plan.output_slots[plan.values[v].io_index],
                                            plan.output_dtypes[o], plan.output_shapes[o]);
          continue;
        }
        if (outer_capture)
          throw Error(ErrorKind::kInvalidArgument,
                      "output " + std::to_string(o) + " is an input or a constant, which a graph captured on the "
                      "caller's stream cannot copy into a new tensor");
        copy_out.emplace_back(o, value_ptrs_[v]);
        outputs[o] = Tensor::empty_on(plan.output_dtypes[o], plan.output_shapes[o], device_, stream_);
        allocated = true;
      }
    if (allocated && !own && !skip_waits) {
      stream_->record(*alloc_done_);
      S.wait(*alloc_done_);
    }

    // The steps: a graph's replay, or enqueued one by one.
    if (capture) {
      capture_stream_->begin_capture();
      try {
        enqueue_steps(plan, *capture_stream_, darena, harena);
        ge->exec = capture_stream_->end_capture();
        ++gstats_.captures;
      } catch (const std::exception&) {
        // A capture the device refused (an API a kernel uses is not
        // capturable): end it, remember, run this plan without a graph.
        capture_stream_->abort_capture();
        ge->failed = true;
        ge->exec.reset();
      }
    }
    if (ge && ge->exec) {
      ge->exec->launch(S);
      gstats_.replays += replay;
    } else {
      enqueue_steps(plan, S, darena, harena);
    }
    enqueued = true;
    for (const auto& [o, src] : copy_out) S.copy(outputs[o].data(), src, outputs[o].bytes());

    done_ = free_event();
    S.record(*done_);
    last_stream_ = S.handle();
    ran_ = true;
    if (outer_capture && ro.graph_holds) {
      ro.graph_holds->push_back(pp);
      ro.graph_holds->push_back(device_arena_);
    } else if (outer_capture &&
               std::none_of(held_for_caller_graphs_.begin(), held_for_caller_graphs_.end(),
                            [&](const HeldForCallerGraph& h) { return h.plan == pp && h.arena == device_arena_; })) {
      held_for_caller_graphs_.push_back({pp, device_arena_});
    }
    // Blocks others free on their own stream after every stream that used
    // them: other contexts' outputs we read, our outputs when S is not ours.
    for (auto& st : device_inputs) st->record_use(done_, this);
    if (!own && !outer_capture)
      for (auto& t : outputs)
        if (t.storage()) t.storage()->record_use(done_, this);
    // And we keep the device inputs referenced until the device is done
    // with them (a borrowed tensor's owner may reuse its memory at once).
    if (!device_inputs.empty() && !outer_capture) in_flight_.push_back(InFlight{done_, std::move(device_inputs)});

    if (!ro.host_outputs) {
      for (auto& t : outputs) {
        t.set_ready_event(done_);
        t.set_error_flag(error_flag_);
      }
      return outputs;
    }
    // NumPy out: device -> page-locked staging in stream order, one wait,
    // then into fresh host tensors.
    for (size_t o = 0; o < outputs.size(); ++o) {
      const int v = plan.graph.outputs[o];
      const size_t bytes =
          static_cast<size_t>(shape_numel(plan.output_shapes[o])) * dtype_size(plan.output_dtypes[o]);
      S.copy(harena + plan.output_staging[o], value_ptrs_[v], bytes);
    }
    if (!skip_sync) {
      S.synchronize();
      check_kernel_errors();
    }
    std::vector<Tensor> host(outputs.size());
    for (size_t o = 0; o < outputs.size(); ++o) {
      host[o] = Tensor::empty(plan.output_dtypes[o], plan.output_shapes[o], Device::cpu());
      char* st = harena + plan.output_staging[o];
      api_->host_access({st, host[o].bytes()}, false, "reading an output");
      if (host[o].bytes()) std::memcpy(host[o].data(), st, host[o].bytes());
    }
    return host;
  } catch (...) {
    // Whatever this run enqueued before failing still runs: the next run
    // (on any stream) must be ordered after it, as after a whole run.
    if (enqueued) {
      try {
        done_ = free_event();
        S.record(*done_);
        last_stream_ = S.handle();
        ran_ = true;
      } catch (...) {
      }
    }
    throw;
  }
}

}  // namespace twinfer
