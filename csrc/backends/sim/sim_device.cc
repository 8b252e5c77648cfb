// The simulated device itself: memory blocks, the enqueue path with its
// ordering checks, host synchronisation, and registration as "sim:N".
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <thread>
#include <random>

#include "backends/sim/sim_internal.h"
#include "core/error.h"
#include "core/host_memory.h"

namespace twinfer::sim {

namespace {

// The stream whose worker a wait task locked may be destroyed while the task
// waits: the task's reference is then the last, and destroying a Worker
// joins its thread. From another worker's thread that can deadlock (the
// joined queue may itself wait on this worker, which is busy joining), as a
// CI run did. Such references are dropped on this one thread instead. Made
// once and never destroyed (no static destruction order at exit); a forked
// child starts its own.
class Reaper {
 public:
  void release(std::shared_ptr<Worker> p) {
    std::lock_guard<std::mutex> lock(m_);
    if (pid_ != getpid()) {  // a fork's child: the parent's thread is not here
      pid_ = getpid();
      std::thread([this] { loop(); }).detach();
    }
    dead_.push_back(std::move(p));
    cv_.notify_one();
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(m_);
    for (;;) {
      cv_.wait(lock, [&] { return !dead_.empty(); });
      std::deque<std::shared_ptr<Worker>> batch;
      batch.swap(dead_);
      lock.unlock();
      batch.clear();  // the joins, if these were the last references
      lock.lock();
    }
  }
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Worker>> dead_;
  pid_t pid_ = 0;
};

void release_off_worker(std::shared_ptr<Worker> p) {
  static Reaper* reaper = new Reaper();
  reaper->release(std::move(p));
}

}  // namespace

// ---- configuration ----------------------------------------------------------

namespace {
std::atomic<int> g_max_delay_us{50};
std::atomic<uint64_t> g_seed{0};
std::atomic<bool> g_check_order{true};
std::atomic<uint64_t> g_memory_limit{0};
std::atomic<int> g_compute_capability{90};
}  // namespace

SimConfig sim_config() {
  SimConfig c;
  c.max_delay_us = g_max_delay_us.load(std::memory_order_relaxed);
  c.seed = g_seed.load(std::memory_order_relaxed);
  c.check_order = g_check_order.load(std::memory_order_relaxed);
  c.memory_limit = g_memory_limit.load(std::memory_order_relaxed);
  c.compute_capability = g_compute_capability.load(std::memory_order_relaxed);
  return c;
}

void set_sim_config(const SimConfig& c) {
  g_max_delay_us = c.max_delay_us < 0 ? 0 : c.max_delay_us;
  g_seed = c.seed;
  g_check_order = c.check_order;
  g_memory_limit = c.memory_limit;
  g_compute_capability = c.compute_capability;
}

// ---- allocators -------------------------------------------------------------

namespace {

constexpr size_t kBlockAlignment = 256;  // cudaMalloc's guarantee

class SimAllocator final : public Allocator {
 public:
  SimAllocator(SimDevice& d, MemorySpace space) : dev_(d), space_(space) {}
  void* allocate(size_t bytes) override { return dev_.allocate_block(bytes, space_); }
  void deallocate(void* p, size_t) override { dev_.free_block_now(p); }
  void* allocate_async(size_t bytes, Stream& s) override {
    void* p = dev_.allocate_block(bytes, space_);
    // The block is born in `s`'s order: another stream must wait before using it.
    Item it;
    it.what = "a stream-ordered allocation";
    it.acc.writes.push_back({p, bytes});
    dev_.enqueue(sim_stream(s), std::move(it));
    return p;
  }
  void deallocate_async(void* p, size_t, Stream& s) override { dev_.free_block_on(p, sim_stream(s)); }
  Device device() const override { return dev_.device(); }

 private:
  SimStream& sim_stream(Stream& s) {
    auto* ss = dynamic_cast<SimStream*>(&s);
    if (!ss) throw Error(ErrorKind::kDevice, "a stream of another device given to " + dev_.name());
    return *ss;
  }
  SimDevice& dev_;
  MemorySpace space_;
};

}  // namespace

// ---- SimDevice --------------------------------------------------------------

SimDevice::SimDevice(int index)
    : index_(index),
      device_alloc_(std::make_unique<SimAllocator>(*this, MemorySpace::kDevice)),
      pinned_alloc_(std::make_unique<SimAllocator>(*this, MemorySpace::kPinned)),
      // CUDA's split of an H100: 16 groups of 8 SMs (4 SMs left over).
      partitioner_("sim:" + std::to_string(index), kSimSms, std::vector<int>(kSimSms / kSimSmGroup, kSimSmGroup)) {
  host_clock_.assign(1, 0);
}

SimDevice::~SimDevice() = default;

void SimDevice::throw_deferred() {
  if (deferred_.empty()) return;
  std::string msg;
  msg.swap(deferred_);
  throw Error(ErrorKind::kRuntime, msg);
}

std::shared_ptr<Stream> SimDevice::make_stream(int priority, int sm_count, std::vector<int> groups) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto range = priority_range();
  priority = std::min(std::max(priority, range.second), range.first);
  const int id = next_stream_id_++;
  const uint64_t base = sim_config().seed;
  const uint64_t seed = base ? base * 1000003u + static_cast<uint64_t>(id) : std::random_device{}();
  auto s = std::make_shared<SimStream>(*this, id, priority, seed, sm_count, std::move(groups));
  streams_[id] = s;
  return s;
}

std::shared_ptr<Stream> SimDevice::create_stream(int priority) { return make_stream(priority, 0, {}); }

std::shared_ptr<Stream> SimDevice::create_partitioned_stream(int priority, double sm_share) {
  SmPartitioner::Grant g = partitioner_.acquire(sm_share);
  try {
    return make_stream(priority, g.sms, g.groups);
  } catch (...) {
    partitioner_.release(g.groups);
    throw;
  }
}

double SimDevice::elapsed_ms(Event& start, Event& end) {
  int64_t t[2] = {0, 0};
  Event* ev[2] = {&start, &end};
  for (int k = 0; k < 2; ++k) {
    auto* se = dynamic_cast<SimEvent*>(ev[k]);
    if (!se) throw Error(ErrorKind::kDevice, "an event of another device timed on " + name());
    if (!se->timing)
      throw Error(ErrorKind::kInvalidArgument, "simulated device: elapsed_ms needs timing events (create_timing_event)");
    if (!se->ready() || se->stamp_ns.load() < 0)
      throw Error(ErrorKind::kRuntime,
                  "simulated device: elapsed_ms of an event not recorded or not reached yet (CUDA: cudaErrorNotReady)");
    t[k] = se->stamp_ns.load();
  }
  return static_cast<double>(t[1] - t[0]) / 1e6;
}

std::shared_ptr<Stream> SimDevice::borrow_stream(uintptr_t handle) {
  if (handle == 1 || handle == 2) {
    std::call_once(default_once_, [&] { default_stream_ = create_stream(0); });
    return default_stream_;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  const int id = handle >= 16 ? static_cast<int>(handle - 15) : -1;
  auto it = streams_.find(id);
  std::shared_ptr<SimStream> s = it == streams_.end() ? nullptr : it->second.lock();
  if (!s)
    throw Error(ErrorKind::kInvalidArgument,
                "no stream with handle " + std::to_string(handle) + " is alive on " + device().str());
  return s;
}

uint64_t SimDevice::begin_capture(SimStream& s) {
  if (s.capture_id) throw Error(ErrorKind::kRuntime, "simulated device: the stream is already being captured");
  const uint64_t id = next_capture_++;
  Capture& c = captures_[id];
  c.origin = s.id();
  c.thread = std::this_thread::get_id();
  c.streams.push_back(s.id());
  s.capture_id = id;
  s.captured_items = s.joined_upto = 0;
  return id;
}

std::vector<Item> SimDevice::end_capture(SimStream& s) {
  auto it = captures_.find(s.capture_id);
  if (!s.capture_id || it == captures_.end())
    throw Error(ErrorKind::kRuntime, "simulated device: end_capture without begin_capture");
  if (it->second.origin != s.id())
    throw Error(ErrorKind::kRuntime, "simulated device: end_capture on a stream that joined the capture, not the one "
                                     "that began it (CUDA: cudaErrorStreamCaptureUnmatched)");
  if (it->second.thread != std::this_thread::get_id())
    throw Error(ErrorKind::kRuntime, "simulated device: a capture must end on the thread that began it");
  Capture c = std::move(it->second);
  captures_.erase(it);
  // Every stream leaves the capture (CUDA invalidates it on an error too).
  std::string unjoined;
  for (int id : c.streams) {
    auto si = streams_.find(id);
    auto st = si == streams_.end() ? nullptr : si->second.lock();
    if (!st) continue;
    if (id != c.origin && st->captured_items > st->joined_upto) unjoined += (unjoined.empty() ? "" : ", ") + std::to_string(id);
    st->capture_id = 0;
  }
  if (!unjoined.empty())
    throw Error(ErrorKind::kRuntime, "simulated device: end_capture while stream(s) " + unjoined +
                                         " that joined the capture have work the origin stream never waited for "
                                         "(CUDA: cudaErrorStreamCaptureUnjoined)");
  return std::move(c.items);
}

void SimDevice::forget_stream(int id) {
  std::lock_guard<std::mutex> lock(mutex_);
  streams_.erase(id);
}

MemorySpace SimDevice::space_of(const void* p) const {
  std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(mutex_));
  return order_.space_of(p);
}

void SimDevice::check_not_capturing(const char* what) {
  if (thread_is_capturing())
    throw Error(ErrorKind::kRuntime, std::string("simulated device: ") + what +
                                         " on a thread that is capturing a graph (CUDA forbids it there)");
}

uint64_t SimDevice::enqueue(SimStream& s, Item item) {
  std::lock_guard<std::mutex> lock(mutex_);
  throw_deferred();
  SimEvent* waits = item.wait.get();
  if (waits && waits->capture_id) {
    // An edge inside a capture: a stream outside it joins the capture (its
    // later work is captured too, as CUDA does); nothing else may wait.
    if (!capture_alive(waits->capture_id))
      throw Error(ErrorKind::kRuntime,
                  "simulated device: waiting on an event last recorded in a graph capture that has ended (CUDA: "
                  "cudaErrorCapturedEvent); the graph's launches order that work");
    if (s.capture_id == 0) {
      s.capture_id = waits->capture_id;
      s.captured_items = s.joined_upto = 0;
      captures_[s.capture_id].streams.push_back(s.id());
    } else if (s.capture_id != waits->capture_id) {
      throw Error(ErrorKind::kRuntime, "simulated device: a stream being captured waits on an event of another capture");
    }
  }
  if (s.capture_id) {
    if (item.frees)
      throw Error(ErrorKind::kRuntime, "simulated device: a block freed on a stream that is being captured");
    if (waits && waits->recorded && !waits->capture_id)
      throw Error(ErrorKind::kRuntime,
                  "simulated device: a stream being captured waits on an event recorded outside the capture (CUDA: "
                  "cudaErrorStreamCaptureIsolation); order that work before the capture begins");
    Capture& c = captures_[s.capture_id];
    ++s.captured_items;
    if (item.record) {
      item.record->capture_id = s.capture_id;
      item.record->recorded_on = s.id();
      item.record->recorded_at = s.captured_items;
    }
    if (waits && waits->capture_id && waits->recorded_on != s.id()) {
      auto it = streams_.find(waits->recorded_on);
      if (auto src = it == streams_.end() ? nullptr : it->second.lock())
        src->joined_upto = std::max(src->joined_upto, waits->recorded_at);
    }
    c.items.push_back(std::move(item));
    return 0;
  }
  if (item.record) item.record->capture_id = 0;  // recorded outside a capture again
  Clock& vc = s.clock;
  clock_join(vc, host_clock_);  // work enqueued now comes after what the host did so far
  if (vc.size() <= static_cast<size_t>(s.id())) vc.resize(s.id() + 1, 0);
  ++vc[s.id()];
  if (item.wait && item.wait->recorded) clock_join(vc, item.wait->clock);
  if (sim_config().check_order) {
    try {
      order_.access(s.id(), vc, item.acc, item.what);
    } catch (const Error& e) {
      // A free runs from a destructor, which cannot throw: keep the error for
      // the next synchronisation or enqueue (and leak the block).
      if (!item.frees) throw;
      deferred_ = e.what();
      return s.worker()->pushed();
    }
  }
  if (item.frees) order_.mark_freed(item.frees);
  const uint64_t index = s.worker()->pushed();
  if (item.record) {
    item.record->worker = s.worker();
    item.record->recorded = true;
    item.record->target = index + 1;
    item.record->clock = vc;
  }
  std::function<void()> task;
  if (item.wait && item.wait->recorded) {
    // Weak: a task must not hold its own worker alive (it would be joined
    // from its own thread); an expired worker has finished its queue. A
    // stream waiting on its own event needs no task: its queue is in order.
    std::weak_ptr<Worker> w = item.wait->worker;
    if (w.lock() == s.worker()) w.reset();
    const uint64_t t = item.wait->target;
    task = [w, t] {
      if (auto p = w.lock()) {
        p->wait_done(t);
        release_off_worker(std::move(p));
      }
    };
  } else if (item.frees) {
    void* p = const_cast<void*>(item.frees);
    task = [this, p] { release_block(p); };
  } else {
    task = std::move(item.run);
  }
  s.worker()->push(std::move(task));
  return index;
}

void SimDevice::host_learns(const Clock& c) {
  std::lock_guard<std::mutex> lock(mutex_);
  clock_join(host_clock_, c);
}

Clock SimDevice::stream_clock(const SimStream& s) {
  std::lock_guard<std::mutex> lock(mutex_);
  return s.clock;
}

void SimDevice::host_access(const MemoryRange& r, bool write, const char* what) {
  if (!r.ptr || !r.bytes) return;
  std::lock_guard<std::mutex> lock(mutex_);
  throw_deferred();
  const MemoryOrder::Block* b = order_.find(r.ptr);
  if (!b) return;  // pageable host memory: not the device's business
  if (b->space == MemorySpace::kDevice)
    throw Error(ErrorKind::kRuntime, std::string("simulated device: the host ") + (write ? "writes" : "reads") +
                                         " device memory directly: " + what + " (a copy is missing)");
  if (!sim_config().check_order) return;
  ++host_clock_[kHostAgent];
  Accesses acc;
  (write ? acc.writes : acc.reads).push_back(r);
  order_.access(kHostAgent, host_clock_, acc, what);
}

void SimDevice::drain_streams() {
  std::vector<std::shared_ptr<SimStream>> live;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& kv : streams_)
      if (auto s = kv.second.lock()) live.push_back(s);
  }
  for (auto& s : live) s->worker()->wait_done(s->worker()->pushed());
}

void SimDevice::synchronize() {
  std::vector<std::shared_ptr<SimStream>> live;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& kv : streams_)
      if (auto s = kv.second.lock()) live.push_back(s);
  }
  std::exception_ptr first;
  for (auto& s : live) {
    const uint64_t target = s->worker()->pushed();
    Clock c = stream_clock(*s);
    s->worker()->wait_done(target);
    host_learns(c);
    if (auto e = s->worker()->take_error())
      if (!first) first = e;
  }
  if (first) std::rethrow_exception(first);
  std::lock_guard<std::mutex> lock(mutex_);
  throw_deferred();
}

void* SimDevice::allocate_block(size_t bytes, MemorySpace space) {
  check_not_capturing(space == MemorySpace::kDevice ? "allocating device memory" : "allocating pinned memory");
  const size_t size = (std::max<size_t>(bytes, 1) + kBlockAlignment - 1) / kBlockAlignment * kBlockAlignment;
  const uint64_t limit = sim_config().memory_limit;
  if (space == MemorySpace::kDevice && limit && !Worker::current()) {
    bool over;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      over = device_bytes_ + size > limit;
    }
    // Blocks freed in stream order still count until their stream runs the
    // free. CUDA's allocator, short of memory, waits for pending frees and
    // tries again (cuda_device.cc, trim): so does the simulated one.
    if (over) drain_streams();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (space == MemorySpace::kDevice && limit && device_bytes_ + size > limit)
      throw Error(ErrorKind::kOutOfMemory, "out of memory on " + device().str() + " allocating " +
                                               std::to_string(bytes) + " bytes (" + std::to_string(device_bytes_) +
                                               " of " + std::to_string(limit) + " in use)");
    if (space == MemorySpace::kDevice) device_bytes_ += size;
  }
  void* p = nullptr;
  try {
    // The block is host memory, filled below: an overcommitted one would get
    // the process killed rather than fail.
    check_host_allocation(size, 0, "simulated device memory");
    p = std::aligned_alloc(kBlockAlignment, size);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (space == MemorySpace::kDevice) device_bytes_ -= size;
    throw;
  }
  if (!p) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (space == MemorySpace::kDevice) device_bytes_ -= size;
    throw Error(ErrorKind::kOutOfMemory, "out of host memory for " + device().str() + " allocating " +
                                             std::to_string(bytes) + " bytes");
  }
  // Never-written memory reads as NaN (0xFF bytes), not as plausible zeros.
  std::memset(p, 0xFF, size);
  std::lock_guard<std::mutex> lock(mutex_);
  order_.add_block(p, size, space);
  return p;
}

void SimDevice::release_block(void* p) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    uintptr_t base = 0;
    const MemoryOrder::Block* b = order_.find(p, &base);
    if (b && b->space == MemorySpace::kDevice) device_bytes_ -= b->bytes;
    order_.remove_block(p);
  }
  std::free(p);
}

void SimDevice::free_block_now(void* p) {
  // cudaFree and cudaFreeHost wait for the whole device first.
  try {
    synchronize();
  } catch (...) {
    // The error belongs to whoever synchronises next; the block goes anyway.
  }
  release_block(p);
}

void SimDevice::free_block_on(void* p, SimStream& s) {
  size_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const MemoryOrder::Block* b = order_.find(p);
    if (b) bytes = b->bytes;
  }
  Item it;
  it.what = "a stream-ordered free";
  it.frees = p;
  it.acc.writes.push_back({p, bytes});
  enqueue(s, std::move(it));
}

// ---- registration -----------------------------------------------------------

namespace {

constexpr int kMaxSimDevices = 4;

DeviceApi& sim_device(int index) {
  static std::mutex m;
  // Never destroyed: streams and blocks may outlive static destruction.
  static SimDevice* devices[kMaxSimDevices] = {};
  if (index < 0 || index >= kMaxSimDevices)
    throw Error(ErrorKind::kDevice, "no simulated device sim:" + std::to_string(index) + " (sim:0 to sim:" +
                                        std::to_string(kMaxSimDevices - 1) + " exist)");
  std::lock_guard<std::mutex> lock(m);
  if (!devices[index]) devices[index] = new SimDevice(index);
  return *devices[index];
}

struct Registrar {
  Registrar() { register_device_api(DeviceType::kSim, sim_device); }
} registrar;

}  // namespace

}  // namespace twinfer::sim

namespace twinfer::sim {

// Kernel tracing: the executor notes each kernel task with the steady clock
// (runtime/device_execution.cc), the simulated device keeps those that ran
// while a trace was on.
void SimDevice::start_kernel_trace() {
  std::lock_guard<std::mutex> lock(trace_mutex_);
  if (tracing_) throw Error(ErrorKind::kDevice, name() + ": a kernel trace is already running");
  trace_.clear();
  tracing_ = true;
}

std::vector<KernelSpan> SimDevice::stop_kernel_trace() {
  std::lock_guard<std::mutex> lock(trace_mutex_);
  tracing_ = false;
  return std::move(trace_);
}

uint64_t SimDevice::trace_clock_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

void SimDevice::note_host_kernel(const std::string& node, const std::string& op, uint64_t start_ns,
                                 uint64_t end_ns) {
  if (!tracing_) return;
  // The stream whose worker runs the task: a graph captured on one stream
  // replays on another, as CUDA reports a graph's kernels on the launch stream.
  const Worker* w = Worker::current();
  KernelSpan k{node.empty() ? op : node + " (" + op + ")", w ? SimStream::handle_of(w->id()) : 0, start_ns, end_ns};
  std::lock_guard<std::mutex> lock(trace_mutex_);
  if (tracing_) trace_.push_back(std::move(k));
}

}  // namespace twinfer::sim
