// Plans built ahead. A run whose input shapes have grown by the same step
// for its last new plans (a decoder's past length, one token a step) will
// most likely come next with one step more. The engine builds that plan on a
// background thread while the caller is busy with this step's results, so
// the next run finds it in the plan cache instead of building it: on small
// models a plan for new shapes costs ten times the step itself.
//
// A guess costs a plan build on another core, and a place in the plan cache
// when it is wrong; never a wrong result: the plan is keyed by the shapes it
// was built for, like any other.
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/shape.h"

namespace twinfer {

// The input shapes that continue `recent` (oldest first) when its last three
// entries form a progression: the same ranks, and the same step per dim
// twice, not all zero. Null otherwise, or when a dim would go negative.
std::optional<std::vector<Shape>> next_in_progression(const std::vector<std::vector<Shape>>& recent);

// One thread that runs the tasks posted to it in order, a few waiting at
// most. Started on first use, gone after a second idle, started again by
// the next post; safe across fork() (the child starts its own when needed).
class PlanAheadWorker {
 public:
  PlanAheadWorker();
  PlanAheadWorker(const PlanAheadWorker&) = delete;
  PlanAheadWorker& operator=(const PlanAheadWorker&) = delete;
  ~PlanAheadWorker();  // drops a task not started, waits for the one running

  static constexpr size_t kMaxWaiting = 2;
  bool post(std::function<void()> task);  // false: not taken (full, or stopping)
  void wait_idle();                       // until nothing is waiting or running
  // Called in a forked child, its only thread, after the worker is reset:
  // for the owner to forget what the parent's other threads were doing (a
  // plan they were building, which no thread of the child will finish).
  void on_fork_child(std::function<void()> reset) { fork_child_reset_ = std::move(reset); }

 private:
  void loop();
  // pthread_atfork's handlers for every worker (plan_ahead.cc).
  static void before_fork();
  static void after_fork(bool child);

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> waiting_;
  bool running_ = false;
  bool stop_ = false;
  bool exited_ = false;  // the thread left after idling (joinable, not running)
  std::thread thread_;
  std::function<void()> fork_child_reset_;
};

}  // namespace twinfer
