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

// The time of one run of `launch` (work enqueued on the stream it is given:
// a private non-blocking one), in ms: after a warm-up run, the fastest of
// `reps` timings of four runs back to back (so the host's enqueue time hides
// behind the device's work, as in a captured plan). +infinity when `launch`
// throws without a device fault (a form the library refuses, no memory); a
// device fault raises Error(kRuntime). For choosing between two
// implementations of a layer at plan build, on TrialBuffers; in relaxed
// capture mode, as every build-time launch. `launch` takes whatever locks
// its library needs itself.
float fastest_launch_ms(const std::function<void(cudaStream_t)>& launch, int reps = 3);

// Two forms of one layer timed against each other at plan build: `measure`
// makes the trial operands and returns each form's fastest_launch_ms; a
// trial without the memory for its operands (Error kOutOfMemory) counts as
// untimed. `first_wins` only when the first form was strictly faster (so the
// caller's second, its default, is kept when nothing was timed); `timed`
// says both, "timed: <first> X ms, <second> Y ms", for the kernel's name.
struct FormTiming {
  bool first_wins = false;
  std::string timed;
};
FormTiming time_two_forms(const char* first, const char* second,
                          const std::function<std::pair<float, float>()>& measure);

}  // namespace twinfer::cuda
