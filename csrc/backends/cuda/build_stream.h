// Device work a plan's build does at once (a kernel's own constants, a
// cuBLASLt trial's zeroed operands) goes through a non-blocking stream of the
// device's own and waits for it, never through the legacy default stream:
// that stream is torch's default (a build would queue behind the user's
// work and hold it up) and cannot be used at all while any blocking stream
// of the context is being captured (CuPy's default stream is blocking).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace twinfer::cuda {

// Copies host bytes to the current device's memory and returns when done.
void copy_to_device_now(void* dst, const void* src, size_t bytes, const char* what);
// Zeroes device memory of the current device and returns when done.
void zero_device_now(void* dst, size_t bytes, const char* what);

// Zeroed device memory for a trial's operands (cuBLASLt's algorithms,
// cuDNN's plans timed at build), freed with the object.
class TrialBuffer {
 public:
  explicit TrialBuffer(size_t bytes);
  ~TrialBuffer();
  TrialBuffer(const TrialBuffer&) = delete;
  TrialBuffer& operator=(const TrialBuffer&) = delete;
  void* get() const { return p_; }

 private:
  void* p_ = nullptr;
};

// A private non-blocking stream and two timing events for a build-time
// trial (cuBLASLt's candidates, cuDNN's plans, two forms of a layer),
// released however the trial ends.
struct TrialClock {
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  TrialClock();
  ~TrialClock();
  TrialClock(const TrialClock&) = delete;
  TrialClock& operator=(const TrialClock&) = delete;

 private:
  void release();
};

// Two implementations of a layer timed against each other at plan build, on
// TrialBuffers (work enqueued on the stream each launch is given: a private
// non-blocking one), in ms a run: both warmed up (lazy module loads,
// first-touch costs), then timed in turns, first second first second..., so
// that clocks ramping up weigh on both alike; each the fastest of `reps`
// timings of four runs back to back (the host's enqueue time hides behind the
// device's work, as in a captured plan). Once one form is four times the
// other's time, neither is timed again: the choice is made, and a slow form
// on a large layer (our attention kernel on a long prompt) would otherwise
// cost the build seconds. +infinity for a form whose launch throws without a
// device fault (a form the library refuses, no memory); a device fault
// raises Error(kRuntime). In relaxed capture mode, as every build-time
// launch. Each launch takes whatever locks its library needs itself.
using TrialLaunch = std::function<void(cudaStream_t)>;
std::pair<float, float> fastest_of_two_ms(const TrialLaunch& first, const TrialLaunch& second, int reps = 3);

// The numbers that decide a trial's times (shapes, strides, dtype, options),
// as the key under which time_two_forms keeps its choice, after the kind of
// layer (two kinds may time forms of the same names). What goes in describes
// the forms, never their display names: those carry measured times.
class TrialKey {
 public:
  TrialKey() = default;  // empty: the outcome is not kept
  explicit TrialKey(const char* kind) : key_(std::string(kind) + '|') {}
  TrialKey& operator<<(int64_t v) {
    key_ += std::to_string(v);
    key_ += ',';
    return *this;
  }
  TrialKey& operator<<(const std::vector<int64_t>& v) {
    for (int64_t x : v) *this << x;
    key_ += ';';
    return *this;
  }
  TrialKey& operator<<(const std::string& v) {
    key_ += v;
    key_ += '|';
    return *this;
  }
  const std::string& str() const { return key_; }

 private:
  std::string key_;
};

// Two forms of one layer timed against each other: `measure` makes the
// trial operands and returns fastest_of_two_ms. A trial without the memory
// for its operands (Error kOutOfMemory) counts as untimed. `first_wins` only
// when the first form was strictly faster (so the caller's second, its
// default, is kept when nothing was timed); `timed` says both,
// "timed: <first> X ms, <second> Y ms", for the kernel's name. The outcome is
// kept for the process per device and `key` (layers of one shape, a model's
// twelve attention layers, choose once and alike); an empty key is never kept.
struct FormTiming {
  bool first_wins = false;
  std::string timed;
};
FormTiming time_two_forms(const char* first, const char* second, const TrialKey& key,
                          const std::function<std::pair<float, float>()>& measure);

}  // namespace twinfer::cuda
