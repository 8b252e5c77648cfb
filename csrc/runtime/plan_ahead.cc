#include "runtime/plan_ahead.h"

#include <pthread.h>

#include <chrono>
#include <new>
#include <set>
#include <utility>

namespace twinfer {

std::optional<std::vector<Shape>> next_in_progression(const std::vector<std::vector<Shape>>& recent) {
  if (recent.size() < 3) return std::nullopt;
  const std::vector<Shape>& a = recent[recent.size() - 3];
  const std::vector<Shape>& b = recent[recent.size() - 2];
  const std::vector<Shape>& c = recent.back();
  if (a.size() != c.size() || b.size() != c.size()) return std::nullopt;
  std::vector<Shape> next = c;
  bool moves = false;
  for (size_t i = 0; i < c.size(); ++i) {
    if (a[i].size() != c[i].size() || b[i].size() != c[i].size()) return std::nullopt;
    for (size_t d = 0; d < c[i].size(); ++d) {
      const int64_t step = c[i][d] - b[i][d];
      if (b[i][d] - a[i][d] != step) return std::nullopt;
      if (c[i][d] + step < 0) return std::nullopt;
      next[i][d] = c[i][d] + step;
      moves = moves || step != 0;
    }
  }
  if (!moves) return std::nullopt;
  return next;
}

// ---- fork() ------------------------------------------------------------------
// A child process has none of the parent's threads. Before a fork every
// worker finishes what it has (its tasks take the engines' locks, which the
// child must find free) and holds its lock through the fork; the child's
// copies forget their thread and start a new one when next posted to.

namespace {

struct Workers {
  std::mutex mutex;
  std::set<PlanAheadWorker*> live;
};

Workers& workers() {
  static Workers* w = new Workers;  // never destroyed: fork handlers may run late
  return *w;
}

}  // namespace

void PlanAheadWorker::before_fork() {
  workers().mutex.lock();
  for (PlanAheadWorker* w : workers().live) {
    std::unique_lock<std::mutex> lock(w->mutex_);
    w->cv_.wait(lock, [&] { return w->stop_ || (w->waiting_.empty() && !w->running_); });
    lock.release();  // held until after the fork
  }
}

void PlanAheadWorker::after_fork(bool child) {
  for (PlanAheadWorker* w : workers().live) {
    if (child) {
      // The handle names a thread this process does not have: it can be
      // neither joined nor destroyed joinable, so it is left behind.
      if (w->thread_.joinable()) new std::thread(std::move(w->thread_));
      w->exited_ = false;
      // The parent's idle thread was waiting on the condition variable: its
      // state counts a waiter this process does not have, and a notify
      // would wait for it forever. A fresh one (never destroyed: that too
      // would wait) replaces it.
      new (&w->cv_) std::condition_variable();
    }
    w->mutex_.unlock();
    if (child && w->fork_child_reset_) w->fork_child_reset_();
  }
  workers().mutex.unlock();
}

// ---- the worker ----------------------------------------------------------------

// Known to the fork handlers from the start (registering in post() would
// take their lock under an engine's, which a fork waiting on this worker's
// task, itself waiting for the engine's lock, would deadlock on).
PlanAheadWorker::PlanAheadWorker() {
  static std::once_flag handlers;
  std::call_once(handlers, [] {
    pthread_atfork(&PlanAheadWorker::before_fork, [] { after_fork(false); }, [] { after_fork(true); });
  });
  std::lock_guard<std::mutex> registry(workers().mutex);
  workers().live.insert(this);
}

PlanAheadWorker::~PlanAheadWorker() {
  {
    std::lock_guard<std::mutex> registry(workers().mutex);
    workers().live.erase(this);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    waiting_.clear();
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool PlanAheadWorker::post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_ || waiting_.size() >= kMaxWaiting) return false;
    waiting_.push_back(std::move(task));
    if (!thread_.joinable() || exited_) {
      if (thread_.joinable()) thread_.join();  // it left after idling; it holds no lock now
      exited_ = false;
      thread_ = std::thread([this] { loop(); });
    }
  }
  cv_.notify_all();
  return true;
}

void PlanAheadWorker::wait_idle() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return stop_ || (waiting_.empty() && !running_); });
}

void PlanAheadWorker::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    // A thread idle this long leaves (the next post starts another): a
    // process that stopped decoding does not keep it, and fork() in a
    // process with no thread of ours left is the safe kind.
    if (!cv_.wait_for(lock, std::chrono::seconds(1), [&] { return stop_ || !waiting_.empty(); })) {
      exited_ = true;
      return;
    }
    if (stop_) return;
    std::function<void()> task = std::move(waiting_.front());
    waiting_.pop_front();
    running_ = true;
    lock.unlock();
    // A guess that fails is no one's error: the run that needs those shapes,
    // if one comes, builds its plan and reports what is wrong.
    try {
      task();
    } catch (...) {
    }
    lock.lock();
    running_ = false;
    cv_.notify_all();
  }
}

}  // namespace twinfer
