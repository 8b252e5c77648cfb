#include "runtime/plan_ahead.h"

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

PlanAheadWorker::~PlanAheadWorker() {
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
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
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
    cv_.wait(lock, [&] { return stop_ || !waiting_.empty(); });
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
