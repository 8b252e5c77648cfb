// Streams, events and graphs of the simulated device.
#include <chrono>
#include <cstring>

#include "backends/sim/sim_internal.h"
#include "core/error.h"

namespace twinfer::sim {

// ---- Worker -----------------------------------------------------------------

namespace {
thread_local Worker* tls_worker = nullptr;
thread_local const SimStream* tls_capturing = nullptr;  // the stream this thread captures
}  // namespace

Worker* Worker::current() { return tls_worker; }

Worker::Worker(int id, uint64_t seed) : id_(id), rng_(seed), thread_([this] { loop(); }) {}

Worker::~Worker() {
  {
    std::lock_guard<std::mutex> lock(m_);
    stop_ = true;
  }
  cv_work_.notify_all();
  thread_.join();
}

void Worker::push(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(m_);
    queue_.push_back(std::move(task));
    ++pushed_;
  }
  cv_work_.notify_one();
}

uint64_t Worker::pushed() const {
  std::lock_guard<std::mutex> lock(m_);
  return pushed_;
}

uint64_t Worker::done() const {
  std::lock_guard<std::mutex> lock(m_);
  return done_;
}

void Worker::wait_done(uint64_t target) {
  if (tls_worker == this) return;  // a task waiting for its own queue would never return
  std::unique_lock<std::mutex> lock(m_);
  cv_done_.wait(lock, [&] { return done_ >= target; });
}

std::exception_ptr Worker::take_error() {
  std::lock_guard<std::mutex> lock(m_);
  std::exception_ptr e = error_;
  error_ = nullptr;
  return e;
}

void Worker::loop() {
  tls_worker = this;
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(m_);
      cv_work_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    // Late: a GPU runs work some time after it is enqueued, and streams
    // interleave unpredictably. Only ordering the program established holds.
    const int max_delay = sim_config().max_delay_us;
    if (max_delay > 0) {
      const int us = static_cast<int>(rng_() % static_cast<uint64_t>(max_delay + 1));
      if (us > max_delay / 2) std::this_thread::sleep_for(std::chrono::microseconds(us));
      else std::this_thread::yield();
    }
    std::exception_ptr err;
    try {
      if (task) task();
    } catch (...) {
      err = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(m_);
      if (err && !error_) error_ = err;
      ++done_;
    }
    cv_done_.notify_all();
  }
}

// ---- SimEvent ---------------------------------------------------------------

namespace {
Error captured_event_error(const char* what) {
  return Error(ErrorKind::kRuntime, std::string("simulated device: ") + what +
                                        " an event last recorded in a graph capture (CUDA: cudaErrorCapturedEvent)");
}
}  // namespace

bool SimEvent::captured() const {
  std::lock_guard<std::mutex> lock(dev_.mutex_);
  return capture_id != 0;
}

uint64_t SimEvent::capture_sequence() const {
  std::lock_guard<std::mutex> lock(dev_.mutex_);
  return capture_id;
}

void SimEvent::synchronize() {
  std::shared_ptr<Worker> w;
  uint64_t t = 0;
  Clock c;
  {
    std::lock_guard<std::mutex> lock(dev_.mutex_);
    if (capture_id) throw captured_event_error("synchronising with");
    if (!recorded) return;  // never recorded: nothing to wait for
    w = worker.lock();
    t = target;
    c = clock;
  }
  dev_.check_not_capturing("Event.synchronize");
  if (w) w->wait_done(t);
  dev_.host_learns(c);
  if (w)
    if (auto e = w->take_error()) std::rethrow_exception(e);
}

bool SimEvent::ready() {
  std::shared_ptr<Worker> w;
  uint64_t t = 0;
  Clock c;
  {
    std::lock_guard<std::mutex> lock(dev_.mutex_);
    if (capture_id) throw captured_event_error("querying");
    if (!recorded) return true;
    w = worker.lock();
    t = target;
    c = clock;
  }
  if (w && w->done() < t) return false;
  // A successful query orders the host after the event, as cudaEventQuery's does.
  dev_.host_learns(c);
  return true;
}

// ---- SimStream --------------------------------------------------------------

SimStream::SimStream(SimDevice& d, int id, int priority, uint64_t seed, int sm_count, std::vector<int> sm_groups)
    : dev_(d),
      id_(id),
      priority_(priority),
      sm_count_(sm_count),
      sm_groups_(std::move(sm_groups)),
      worker_(std::make_shared<Worker>(id, seed)) {}

SimStream::~SimStream() {
  // The worker finishes what is queued (its thread joins in ~Worker once the
  // last event or wait holding it lets go).
  dev_.forget_stream(id_);
  if (!sm_groups_.empty()) dev_.partitioner().release(sm_groups_);
}

void SimStream::release_sm_share() {
  if (!sm_groups_.empty()) dev_.partitioner().release(sm_groups_);
  sm_groups_.clear();  // not again in the destructor
}

Device SimStream::device() const { return dev_.device(); }

void SimStream::copy(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  const MemorySpace sd = dev_.space_of(dst), ss = dev_.space_of(src);
  if (ss == MemorySpace::kHost && sd == MemorySpace::kHost) {  // pageable to pageable: done at once
    std::memcpy(dst, src, bytes);
    return;
  }
  if (ss == MemorySpace::kHost || sd == MemorySpace::kHost) {
    std::lock_guard<std::mutex> lock(dev_.mutex_);
    if (capture_id)
      throw Error(ErrorKind::kRuntime,
                  "simulated device: a copy to or from pageable host memory during graph capture (CUDA rejects it: "
                  "copy through page-locked staging)");
  }
  if (ss == MemorySpace::kHost) {
    // CUDA stages a pageable source before returning: the caller may reuse it.
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                      static_cast<const char*>(src) + bytes);
    Item it;
    it.what = "a copy from pageable host memory";
    it.acc.writes.push_back({dst, bytes});
    it.run = [dst, staged, bytes] { std::memcpy(dst, staged->data(), bytes); };
    dev_.enqueue(*this, std::move(it));
    return;
  }
  Item it;
  it.what = std::string("a copy from ") + memory_space_name(ss) + " to " + memory_space_name(sd) + " memory";
  it.acc.reads.push_back({src, bytes});
  if (sd != MemorySpace::kHost) it.acc.writes.push_back({dst, bytes});
  it.run = [dst, src, bytes] { std::memcpy(dst, src, bytes); };
  const uint64_t index = dev_.enqueue(*this, std::move(it));
  if (sd == MemorySpace::kHost) {
    // Into pageable memory CUDA returns once the copy is done.
    worker_->wait_done(index + 1);
    Clock c = dev_.stream_clock(*this);
    dev_.host_learns(c);
    if (auto e = worker_->take_error()) std::rethrow_exception(e);
  }
}

void SimStream::memset(void* dst, int value, size_t bytes) {
  if (!bytes) return;
  Item it;
  it.what = "a memset";
  it.acc.writes.push_back({dst, bytes});
  it.run = [dst, value, bytes] { std::memset(dst, value, bytes); };
  dev_.enqueue(*this, std::move(it));
}

void SimStream::host_task(std::function<void()> fn, Accesses acc) {
  Item it;
  it.what = "a kernel";
  it.acc = std::move(acc);
  it.run = std::move(fn);
  dev_.enqueue(*this, std::move(it));
}

namespace {
std::shared_ptr<SimEvent> as_sim_event(Event& e, const SimDevice& d) {
  auto* se = dynamic_cast<SimEvent*>(&e);
  if (!se) throw Error(ErrorKind::kDevice, "an event of another device used on " + d.name());
  return se->shared_from_this();
}
}  // namespace

void SimStream::record(Event& e) {
  Item it;
  it.what = "an event record";
  it.record = as_sim_event(e, dev_);
  if (it.record->timing) {
    SimEvent* ev = it.record.get();  // the item holds it
    it.run = [ev] {
      ev->stamp_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::steady_clock::now().time_since_epoch())
                         .count();
    };
  }
  dev_.enqueue(*this, std::move(it));
}

void SimStream::wait(Event& e) {
  Item it;
  it.what = "an event wait";
  it.wait = as_sim_event(e, dev_);
  dev_.enqueue(*this, std::move(it));
}

void SimStream::synchronize() {
  dev_.check_not_capturing("Stream.synchronize");
  {
    std::lock_guard<std::mutex> lock(dev_.mutex_);
    if (capture_id)
      throw Error(ErrorKind::kRuntime, "simulated device: synchronising a stream that is being captured");
  }
  const uint64_t target = worker_->pushed();
  Clock c = dev_.stream_clock(*this);
  worker_->wait_done(target);
  dev_.host_learns(c);
  if (auto e = worker_->take_error()) std::rethrow_exception(e);
}

void SimStream::begin_capture() {
  std::lock_guard<std::mutex> lock(dev_.mutex_);
  if (tls_capturing) throw Error(ErrorKind::kRuntime, "simulated device: this thread is already capturing a stream");
  dev_.begin_capture(*this);
  tls_capturing = this;
}

std::unique_ptr<GraphExec> SimStream::end_capture() {
  std::vector<Item> items;
  {
    std::lock_guard<std::mutex> lock(dev_.mutex_);
    const bool origin = tls_capturing == this;
    try {
      items = dev_.end_capture(*this);
    } catch (...) {
      if (origin) tls_capturing = nullptr;
      throw;
    }
    tls_capturing = nullptr;
  }
  return std::make_unique<SimGraph>(dev_, std::move(items));
}

bool SimStream::capturing() const {
  std::lock_guard<std::mutex> lock(dev_.mutex_);
  return capture_id != 0;
}

uint64_t SimStream::capture_sequence() const {
  std::lock_guard<std::mutex> lock(dev_.mutex_);
  return capture_id;
}

bool thread_is_capturing() { return tls_capturing != nullptr; }

// ---- SimGraph ---------------------------------------------------------------

void SimGraph::launch(Stream& s) {
  auto* ss = dynamic_cast<SimStream*>(&s);
  if (!ss) throw Error(ErrorKind::kDevice, "a graph of " + dev_.name() + " launched on another device's stream");
  // Run in capture order on one stream: a valid order of the graph (an item
  // was captured after everything it depends on), and the captured event
  // records and waits are the graph's edges, not events, so they go.
  for (const Item& it : items_)
    if (!it.record && !it.wait) dev_.enqueue(*ss, it);
}

}  // namespace twinfer::sim
