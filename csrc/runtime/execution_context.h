// Everything that changes per run: the arenas for intermediates, the
// per-step argument blocks, the thread budget, and on a device the stream,
// the events that order runs, and the captured graphs. One context runs one
// thing at a time: threads that share one take turns (each run holds it),
// so one context per thread is what runs them side by side.
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/device_api.h"
#include "core/tensor.h"
#include "ops/kernel.h"
#include "runtime/plan.h"

namespace twinfer {

// How one run of a device plan goes.
struct RunOptions {
  // Run on this (a caller's) stream; null: the context's own. Inputs on the
  // device must be ready on it (or carry a ready event, which it waits for).
  std::shared_ptr<Stream> stream;
  // Outputs come back as host tensors and the run is waited for (NumPy in,
  // NumPy out); otherwise they are device tensors with a ready event.
  bool host_outputs = false;
  // Capture the run into a graph per plan after its first run, replay after.
  bool cuda_graphs = true;
  // A run captured into a caller's graph: what that graph reads and writes on
  // every launch (the plan, the device arena) goes here, for the graph's owner
  // to keep while the graph lives (a group's graph, evicted with its entry).
  // Null: the context keeps them for its own life, not knowing the graph's.
  std::vector<std::shared_ptr<const void>>* graph_holds = nullptr;
};

class ExecutionContext {
 public:
  // On a device, the context owns a non-blocking stream of `stream_priority`,
  // on `sm_share` of the device's SMs when that is above 0 (a green context).
  ExecutionContext(Device device, int num_threads, int stream_priority = 0, double sm_share = 0);
  ~ExecutionContext();
  ExecutionContext(const ExecutionContext&) = delete;
  ExecutionContext& operator=(const ExecutionContext&) = delete;

  // The context to oneself until the lock goes: what a group's graph holds
  // over its members while it writes their buffers (no run of another
  // thread may land between its event waits and its launch).
  std::unique_lock<std::recursive_mutex> hold() const { return std::unique_lock<std::recursive_mutex>(use_mutex_); }

  int num_threads() const { return num_threads_; }
  void set_num_threads(int n) { num_threads_ = n > 0 ? n : 1; }
  Device device() const { return device_; }
  size_t arena_bytes() const { return arena_ ? arena_->bytes() : 0; }
  size_t device_arena_bytes() const { return device_arena_ ? device_arena_->bytes() : 0; }
  // The context's own stream (null on the CPU).
  const std::shared_ptr<Stream>& stream() const { return stream_; }
  // Where graphs of this context's runs are captured: like stream(), on the
  // same SMs, but one nothing else enqueues on or frees on.
  const std::shared_ptr<Stream>& capture_stream() const { return capture_stream_; }
  // SMs its stream may use (0: the whole device, or the CPU).
  int sm_count() const { return stream_ ? stream_->sm_count() : 0; }

  // Run `plan` on `inputs` (already validated); returns the engine's outputs.
  std::vector<Tensor> execute(const std::shared_ptr<const Plan>& plan, const std::vector<Tensor>& inputs,
                              const RunOptions& options = {});
  // Blocks until this context's last run has finished on the device.
  void synchronize();
  // Raises (and clears) an error this context's kernels reported through its
  // error flag; the host must have waited for them.
  void check_kernel_errors() {
    if (api_) api_->check_kernel_errors(error_flag_.get());
  }
  // That flag, for device outputs of this context's work that others hand
  // out (a group's graph): reading one to the host checks it.
  const std::shared_ptr<void>& error_flag() const { return error_flag_; }
  // Work of others on the context's buffers (a group's graph, which holds
  // this context's runs): `s` waits for the context's latest run, and the
  // context's next run waits for `done` (recorded on `s` after that work).
  void order_before(Stream& s);
  void order_after(Stream& s, std::shared_ptr<Event> done);

  struct GraphStats {
    size_t captures = 0;  // graphs captured
    size_t replays = 0;   // runs that replayed one
    size_t cached = 0;    // graphs held now
    size_t kept_for_callers = 0;  // plans kept for graphs a caller captured runs into
  };
  GraphStats graph_stats() const;

  // Per-step timing (host clock around each kernel; on a device each step is
  // waited for, so profiling serialises the run). Off by default.
  struct StepTime {
    std::string node, op, impl;
    double total_ms = 0;
    int64_t runs = 0;
  };
  void set_profiling(bool on);
  bool profiling() const { return profiling_; }
  // Times of the plan run last (reset when a run uses another plan).
  std::vector<StepTime> step_times() const;

 private:
  // A captured graph of one plan, replayed by later runs at its shapes.
  struct GraphEntry {
    std::shared_ptr<const Plan> plan;  // held: a freed plan's address could be reused
    const void* arena = nullptr;       // the device arena it was captured with
    std::unique_ptr<GraphExec> exec;   // null until captured
    int runs = 0;
    uint64_t last_use = 0;
    bool failed = false;  // capture failed once: this plan runs without a graph
  };

  void prepare(const std::shared_ptr<const Plan>& plan);  // arenas and argument blocks for this plan
  std::vector<Tensor> execute_host(const Plan& plan, const std::vector<Tensor>& inputs);
  std::vector<Tensor> execute_device(const std::shared_ptr<const Plan>& plan, const std::vector<Tensor>& inputs,
                                     const RunOptions& options);
  // Enqueues (or runs, for host steps) every step of `plan` on `s`.
  void enqueue_steps(const Plan& plan, Stream& s, char* device_arena, char* host_arena);
  void run_step(const Plan& plan, size_t index, KernelContext& a);    // timed when profiling
  void run_kernel(const Plan& plan, size_t index, KernelContext& a);  // untimed
  // Device inputs stay referenced until the run that read them has
  // finished (a borrowed torch tensor must not return to torch's allocator
  // while our stream still reads it).
  void release_finished_inputs();
  GraphEntry* graph_for(const std::shared_ptr<const Plan>& plan, const void* arena);

  // Held by each public entry for its whole length: a run rebinds the
  // arenas and argument blocks the previous one wrote through, so two
  // threads in one context at once corrupted each other's results and the
  // heap. Recursive: an entry calls others (execute -> synchronize). Python
  // callers take it without the GIL (a run holding it may need the GIL to
  // release a borrowed tensor). A group's graph holds its members' locks
  // for a whole call (hold()), its replay ordered with their runs by events.
  mutable std::recursive_mutex use_mutex_;
  Device device_;
  int num_threads_;
  std::shared_ptr<Storage> arena_;  // host values (page-locked for device plans)
  std::shared_ptr<const Plan> prepared_for_;  // held, so its address cannot be reused under us
  std::vector<KernelContext> step_args_;
  std::vector<void*> value_ptrs_;
  bool profiling_ = false;
  std::vector<double> step_ms_;
  std::vector<int64_t> step_runs_;

  // Device state.
  DeviceApi* api_ = nullptr;
  std::shared_ptr<Stream> stream_;          // our own: outputs are allocated (and freed) in its order
  std::shared_ptr<Stream> capture_stream_;  // graphs are captured here, never on a stream others free on
  // End of the latest run (its outputs' ready event). Each run records a
  // fresh event from events_, so a tensor of an earlier run keeps waiting
  // for its own run, not for whatever this context ran since.
  std::shared_ptr<Event> done_;
  std::shared_ptr<Event> alloc_done_;       // outputs allocated on stream_, used on a caller's stream
  std::shared_ptr<void> error_flag_;        // its kernels' (DeviceApi::create_kernel_error_flag)
  std::shared_ptr<Event> staging_done_;     // the latest run's input staging copies
  uintptr_t last_stream_ = 0;               // handle of the latest run's stream
  bool ran_ = false, staging_pending_ = false;
  std::shared_ptr<Storage> device_arena_;
  std::vector<std::unique_ptr<GraphEntry>> graphs_;
  // What a graph the caller captured a run of this context into reads and
  // writes on every launch: the plan (its kernels, their constants and
  // library plans) and the device arena. Held for the context's life, as
  // the caller's graph may be launched at any time (a later plan or a
  // larger arena does not free them under it).
  struct HeldForCallerGraph {
    std::shared_ptr<const Plan> plan;
    std::shared_ptr<Storage> arena;
  };
  std::vector<HeldForCallerGraph> held_for_caller_graphs_;
  GraphStats gstats_;
  uint64_t run_counter_ = 0;
  struct InFlight {
    std::shared_ptr<Event> done;  // the run's event
    std::vector<std::shared_ptr<Storage>> inputs;
  };
  std::vector<InFlight> in_flight_;
  // Events for runs; one nobody else holds any more (no tensor, storage or
  // in-flight entry) is recorded again.
  std::vector<std::shared_ptr<Event>> events_;
  std::shared_ptr<Event> free_event();
};

}  // namespace twinfer
