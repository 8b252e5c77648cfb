#include "backends/cuda/build_stream.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <mutex>
#include <string>

#include "backends/cuda/capture_mode.h"
#include "backends/cuda/cuda_check.h"
#include "core/error.h"

namespace twinfer::cuda {
namespace {

// One per device, made on first use and never destroyed (builds may run
// during static destruction's teardown of other objects). Threads share it:
// each waits for its own work and anything queued before it, all short.
cudaStream_t build_stream() {
  static std::mutex mutex;
  static auto* streams = new std::map<int, cudaStream_t>;
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  std::lock_guard<std::mutex> lock(mutex);
  cudaStream_t& s = (*streams)[dev];
  if (!s) check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate (plan build)");
  return s;
}

}  // namespace

void copy_to_device_now(void* dst, const void* src, size_t bytes, const char* what) {
  if (!bytes) return;
  const cudaStream_t s = build_stream();
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s), what);
  check(cudaStreamSynchronize(s), what);
}

void zero_device_now(void* dst, size_t bytes, const char* what) {
  if (!bytes) return;
  const cudaStream_t s = build_stream();
  check(cudaMemsetAsync(dst, 0, bytes, s), what);
  check(cudaStreamSynchronize(s), what);
}

// A trial's allocations and synchronisation must not invalidate a capture
// another thread runs: relaxed capture mode (capture_mode.h) while they run.
TrialBuffer::TrialBuffer(size_t bytes) {
  RelaxedCaptureScope relaxed;
  if (!bytes) return;
  check(cudaMalloc(&p_, bytes), "cudaMalloc (trial operand)");
  try {
    zero_device_now(p_, bytes, "cudaMemsetAsync (trial operand)");
  } catch (...) {
    cudaFree(p_);
    p_ = nullptr;
    throw;
  }
}

TrialBuffer::~TrialBuffer() {
  RelaxedCaptureScope relaxed;
  if (p_ && cudaFree(p_) != cudaSuccess) cudaGetLastError();
}

TrialClock::TrialClock() {
  try {
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate (trial)");
    check(cudaEventCreate(&start), "cudaEventCreate (trial)");
    check(cudaEventCreate(&stop), "cudaEventCreate (trial)");
  } catch (...) {
    release();  // a constructor that throws has no destructor run
    throw;
  }
}

TrialClock::~TrialClock() { release(); }

void TrialClock::release() {
  if (start) cudaEventDestroy(start);
  if (stop) cudaEventDestroy(stop);
  if (stream && cudaStreamDestroy(stream) != cudaSuccess) cudaGetLastError();
  start = stop = nullptr;
  stream = nullptr;
}

std::pair<float, float> fastest_of_two_ms(const TrialLaunch& first, const TrialLaunch& second, int reps) {
  RelaxedCaptureScope relaxed;
  constexpr float kNever = std::numeric_limits<float>::infinity();
  constexpr int kBackToBack = 4;  // launches a timing
  constexpr float kClearly = 4.f;  // a ratio that ends the timing
  const TrialClock c;
  // A launch that throws without a fault (a form the library refuses, no
  // memory for it) makes the form unavailable; a device fault is raised, as
  // it would be at the next call anyway (sticky errors cannot be cleared).
  auto raise_fault = [&]() {
    const cudaError_t synced = cudaStreamSynchronize(c.stream);
    const cudaError_t last = cudaGetLastError();
    const cudaError_t e = synced != cudaSuccess ? synced : last;
    if (e != cudaSuccess && e != cudaErrorMemoryAllocation)
      throw Error(ErrorKind::kRuntime, std::string("a trial launch at plan build: ") + cudaGetErrorString(e));
  };
  auto run = [&](const TrialLaunch& launch, int times) {  // false: `launch` threw
    try {
      for (int k = 0; k < times; ++k) launch(c.stream);
      return true;
    } catch (const Error&) {
      return false;
    }
  };
  const TrialLaunch* forms[2] = {&first, &second};
  float fastest[2] = {kNever, kNever};
  bool live[2];
  for (int i = 0; i < 2; ++i) {
    live[i] = run(*forms[i], 1);  // the warm-up
    raise_fault();
  }
  for (int r = 0; r < std::max(reps, 1) && live[0] && live[1]; ++r) {
    for (int i = 0; i < 2; ++i) {
      float ms = 0.f;
      cudaEventRecord(c.start, c.stream);
      const bool ran = run(*forms[i], kBackToBack);
      cudaEventRecord(c.stop, c.stream);
      const bool timed = cudaEventSynchronize(c.stop) == cudaSuccess &&
                         cudaEventElapsedTime(&ms, c.start, c.stop) == cudaSuccess;
      raise_fault();
      live[i] = ran && timed;
      fastest[i] = live[i] ? std::min(fastest[i], ms / kBackToBack) : kNever;
    }
    if (fastest[0] > kClearly * fastest[1] || fastest[1] > kClearly * fastest[0]) break;
  }
  // A form that warmed up while the other did not is the only one: time it
  // once, for the name.
  for (int i = 0; i < 2; ++i) {
    if (!live[i] || live[1 - i] || fastest[i] < kNever) continue;
    float ms = 0.f;
    cudaEventRecord(c.start, c.stream);
    const bool ran = run(*forms[i], 1);
    cudaEventRecord(c.stop, c.stream);
    const bool timed = cudaEventSynchronize(c.stop) == cudaSuccess &&
                       cudaEventElapsedTime(&ms, c.start, c.stop) == cudaSuccess;
    raise_fault();
    fastest[i] = ran && timed ? ms : kNever;
  }
  return {fastest[0], fastest[1]};
}

FormTiming time_two_forms(const char* first, const char* second, const TrialKey& key,
                          const std::function<std::pair<float, float>()>& measure) {
  static std::mutex mutex;
  static auto* kept = new std::map<std::string, FormTiming>;  // never destroyed, as build_stream's
  std::string where;
  if (!key.str().empty()) {
    int dev = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    where = std::to_string(dev) + "|" + first + "|" + second + "|" + key.str();
    std::lock_guard<std::mutex> lock(mutex);
    const auto it = kept->find(where);
    if (it != kept->end()) return it->second;
  }
  std::pair<float, float> ms{std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity()};
  try {
    ms = measure();
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kOutOfMemory) throw;
    cudaGetLastError();  // no memory for the trial: both stay infinite, so the second form is kept
  }
  char timed[160];
  std::snprintf(timed, sizeof timed, "timed: %s %.3f ms, %s %.3f ms", first, ms.first, second, ms.second);
  const FormTiming t{ms.first < ms.second, timed};
  // Untimed (no memory for the trial) is not kept: a later build may have it.
  if (!where.empty() && (ms.first < std::numeric_limits<float>::infinity() ||
                         ms.second < std::numeric_limits<float>::infinity())) {
    std::lock_guard<std::mutex> lock(mutex);
    kept->emplace(where, t);
  }
  return t;
}

}  // namespace twinfer::cuda
