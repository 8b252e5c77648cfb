// The simulated device's pieces (see sim_device.h for what it models):
// Worker (one stream's queue and thread), SimStream, SimEvent, SimGraph and
// SimDevice, which owns the memory map, the clocks and the one mutex that
// orders all bookkeeping. Lock order: SimDevice::mutex_ before a Worker's;
// a worker never takes the device mutex while holding its own.
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backends/sim/sim_device.h"
#include "backends/sim/sim_order.h"
#include "core/device_api.h"
#include "core/sm_partition.h"

namespace twinfer::sim {

class SimDevice;

// A queue run in order by one thread, each task after a random delay. Tasks
// that throw keep the first error for the next synchronisation and the queue
// goes on, as a GPU's does after a failed kernel.
class Worker {
 public:
  Worker(int id, uint64_t seed);
  ~Worker();
  void push(std::function<void()> task);  // caller holds the device mutex (orders pushes with ticks)
  uint64_t pushed() const;
  uint64_t done() const;
  void wait_done(uint64_t target);  // blocks until the first `target` tasks ran
  std::exception_ptr take_error();
  int id() const { return id_; }
  static Worker* current();  // the worker running the calling thread, if any

 private:
  void loop();

  const int id_;
  mutable std::mutex m_;
  std::condition_variable cv_work_, cv_done_;
  std::deque<std::function<void()>> queue_;
  uint64_t pushed_ = 0, done_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::mt19937_64 rng_;
  std::thread thread_;  // last: starts once the rest is built
};

class SimEvent final : public Event, public std::enable_shared_from_this<SimEvent> {
 public:
  SimEvent(SimDevice& d, bool timing) : timing(timing), dev_(d) {}
  void synchronize() override;
  bool ready() override;
  bool captured() const override;
  uint64_t capture_sequence() const override;
  bool timed() const override { return timing; }

  // Set when a record is enqueued (under the device mutex). Weak: a worker
  // ends with its stream, after finishing its queue, so an expired worker
  // means the recorded point was reached.
  std::weak_ptr<Worker> worker;
  bool recorded = false;
  uint64_t target = 0;
  Clock clock;
  // Recorded inside a capture: its id, the stream and that stream's count of
  // captured items at the record (a later wait on it joins the stream back).
  uint64_t capture_id = 0;
  int recorded_on = 0;
  size_t recorded_at = 0;
  // Timing events: when the stream's worker reached the record (ns, steady clock).
  const bool timing;
  std::atomic<int64_t> stamp_ns{-1};

 private:
  SimDevice& dev_;
};

// What a stream is asked to do, kept as data so a capture can hold it and a
// replay enqueue it again.
struct Item {
  std::string what;
  Accesses acc;
  std::function<void()> run;               // the work (may be empty)
  std::shared_ptr<SimEvent> record, wait;  // event bookkeeping
  const void* frees = nullptr;             // a stream-ordered free of this block
};

class SimStream final : public Stream, public std::enable_shared_from_this<SimStream> {
 public:
  // `sm_groups`: the SM partition the stream holds (returned when it goes).
  SimStream(SimDevice& d, int id, int priority, uint64_t seed, int sm_count = 0, std::vector<int> sm_groups = {});
  ~SimStream() override;
  Device device() const override;
  uintptr_t handle() const override { return handle_of(id_); }
  int priority() const override { return priority_; }
  int sm_count() const override { return sm_count_; }
  void copy(void* dst, const void* src, size_t bytes) override;
  void memset(void* dst, int value, size_t bytes) override;
  void host_task(std::function<void()> fn, Accesses acc) override;
  void record(Event& e) override;
  void wait(Event& e) override;
  void synchronize() override;
  void begin_capture() override;
  std::unique_ptr<GraphExec> end_capture() override;
  void release_sm_share() override;
  bool capturing() const override;
  uint64_t capture_sequence() const override;

  static uintptr_t handle_of(int id) { return static_cast<uintptr_t>(id) + 15; }  // above DLPack's 1/2
  int id() const { return id_; }
  const std::shared_ptr<Worker>& worker() const { return worker_; }

  // Under the device mutex.
  Clock clock;
  // The capture this stream belongs to (0: none): the one it began, or one
  // it joined by waiting on an event recorded in it, as CUDA streams do.
  uint64_t capture_id = 0;
  size_t captured_items = 0, joined_upto = 0;

 private:
  SimDevice& dev_;
  const int id_;
  const int priority_;
  const int sm_count_;
  std::vector<int> sm_groups_;  // given back by release_sm_share or the destructor
  std::shared_ptr<Worker> worker_;
};

// One capture: the stream that began it, the streams that joined, the work.
struct Capture {
  int origin = 0;
  std::thread::id thread;
  std::vector<int> streams;  // origin first
  std::vector<Item> items;
};

bool thread_is_capturing();  // the calling thread has a capture open

class SimGraph final : public GraphExec {
 public:
  SimGraph(SimDevice& d, std::vector<Item> items) : dev_(d), items_(std::move(items)) {}
  void launch(Stream& s) override;
  size_t num_nodes() const override { return items_.size(); }

 private:
  SimDevice& dev_;
  std::vector<Item> items_;
};

class SimDevice final : public DeviceApi {
 public:
  explicit SimDevice(int index);
  ~SimDevice() override;
  Device device() const override { return Device::sim(index_); }
  std::string name() const override { return "simulated device " + std::to_string(index_); }
  Allocator& allocator() override { return *device_alloc_; }
  Allocator& pinned_allocator() override { return *pinned_alloc_; }
  std::shared_ptr<Stream> create_stream(int priority) override;
  std::shared_ptr<Stream> create_partitioned_stream(int priority, double sm_share) override;
  std::shared_ptr<Stream> create_stream_like(const Stream& s, int priority) override {
    return make_stream(priority, s.sm_count(), {});  // the partition stays the first stream's
  }
  std::shared_ptr<Stream> borrow_stream(uintptr_t handle) override;
  std::shared_ptr<Event> create_event() override { return std::make_shared<SimEvent>(*this, false); }
  std::shared_ptr<Event> create_timing_event() override { return std::make_shared<SimEvent>(*this, true); }
  double elapsed_ms(Event& start, Event& end) override;
  int sm_count() const override { return kSimSms; }
  int compute_capability() const override { return sim_config().compute_capability; }
  SmPartitioner& partitioner() { return partitioner_; }
  std::pair<int, int> priority_range() const override { return {0, -5}; }  // like CUDA's on an H100
  MemorySpace space_of(const void* p) const override;
  void host_access(const MemoryRange& r, bool write, const char* what) override;
  bool kernels_run_on_host() const override { return true; }
  void synchronize() override;
  void start_kernel_trace() override;
  std::vector<KernelSpan> stop_kernel_trace() override;
  uint64_t trace_clock_ns() override;
  void note_host_kernel(const std::string& node, const std::string& op, uint64_t start_ns, uint64_t end_ns) override;

  // Enqueues `item` on `s` (or records it while `s` is capturing), after the
  // ordering checks; returns the task's index in the worker (for waits).
  uint64_t enqueue(SimStream& s, Item item);
  // The host has waited for `c` (a stream's or an event's clock).
  void host_learns(const Clock& c);
  Clock stream_clock(const SimStream& s);
  void check_not_capturing(const char* what);  // the calling thread must not be capturing

  // Memory blocks (the allocators').
  void* allocate_block(size_t bytes, MemorySpace space);
  void free_block_now(void* p);  // synchronises the device first, as cudaFree does
  // Waits until every stream has run what is queued on it, without the host
  // learning of it (its reads stay checked) and leaving kernels' errors in place.
  void drain_streams();
  void free_block_on(void* p, SimStream& s);
  void release_block(void* p);  // unregister and free (a worker's free task)
  void forget_stream(int id);

  // Captures (under mutex_).
  uint64_t begin_capture(SimStream& s);
  std::vector<Item> end_capture(SimStream& s);
  bool capture_alive(uint64_t id) const { return captures_.count(id) != 0; }

  std::mutex mutex_;
  static constexpr int kSimSms = 132, kSimSmGroup = 8;  // an H100's SMs and partition granularity

 private:
  void throw_deferred();  // under mutex_: an error a free could not raise

  const int index_;
  MemoryOrder order_;
  std::string deferred_;
  size_t device_bytes_ = 0;
  Clock host_clock_;
  int next_stream_id_ = 1;
  std::map<int, std::weak_ptr<SimStream>> streams_;
  std::map<uint64_t, Capture> captures_;
  uint64_t next_capture_ = 1;
  std::unique_ptr<Allocator> device_alloc_, pinned_alloc_;
  SmPartitioner partitioner_;
  std::shared_ptr<Stream> make_stream(int priority, int sm_count, std::vector<int> groups);
  // Kernel tracing: workers append while `tracing_` (their own mutex: a
  // worker never takes mutex_ while running a task).
  std::atomic<bool> tracing_{false};
  std::mutex trace_mutex_;
  std::vector<KernelSpan> trace_;
  // Handles 1 and 2, CUDA's legacy and per-thread default streams (what a
  // DLPack producer is told when the consumer names no stream): one stream
  // of the device's own, made on first use. (twinfer's streams are
  // non-blocking, so the legacy stream's implicit syncs never concern them.)
  std::once_flag default_once_;
  std::shared_ptr<Stream> default_stream_;
};

}  // namespace twinfer::sim
