// Split [0, n) into chunks over the run's threads (OpenMP, the same runtime
// oneDNN uses, so the two never oversubscribe each other).
#pragma once
#include <algorithm>
#include <cstdint>
#include <exception>

#include <omp.h>

namespace twinfer {

// Calls fn(begin, end) on disjoint ranges covering [0, n). Work below
// `grain` items per thread stays on the calling thread.
template <typename F>
void parallel_for(int64_t n, int num_threads, int64_t grain, F&& fn) {
  if (n <= 0) return;
  int64_t max_chunks = std::max<int64_t>(1, n / std::max<int64_t>(1, grain));
  int threads = static_cast<int>(std::min<int64_t>(num_threads, max_chunks));
  if (threads <= 1) {
    fn(int64_t(0), n);
    return;
  }
  // An exception may not leave an OpenMP region (std::terminate would end
  // the process): the first one a chunk throws is rethrown here, after all.
  std::exception_ptr error;
#pragma omp parallel num_threads(threads)
  {
    int t = omp_get_thread_num();
    int64_t chunk = (n + threads - 1) / threads;
    int64_t b = std::min<int64_t>(n, t * chunk), e = std::min<int64_t>(n, b + chunk);
    if (b < e) {
      try {
        fn(b, e);
      } catch (...) {
#pragma omp critical(twinfer_parallel_for_error)
        if (!error) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

// Sets the calling thread's OpenMP thread budget (what parallel_for and the
// oneDNN primitives created or run meanwhile use) and restores it after.
class ThreadScope {
 public:
  explicit ThreadScope(int threads) : threads_(threads < 1 ? 1 : threads), prev_(omp_get_max_threads()) {
    if (threads_ != prev_) omp_set_num_threads(threads_);
  }
  ~ThreadScope() {
    if (threads_ != prev_) omp_set_num_threads(prev_);
  }
  ThreadScope(const ThreadScope&) = delete;
  ThreadScope& operator=(const ThreadScope&) = delete;
  int threads() const { return threads_; }

 private:
  int threads_;
  int prev_;
};

}  // namespace twinfer
