// The calling thread's stream-capture mode, relaxed for a scope: its API
// calls (allocations, synchronisation of its own streams) then neither fail
// in nor invalidate a capture another thread has under way in global mode
// (torch.cuda.graph's default). For work that is never part of a graph: a
// plan's build, a cuBLASLt trial, an event query. What relaxed mode cannot
// lift (a device-wide sync, the legacy default stream while a blocking
// stream captures) those paths must not do at all.
#pragma once
#include <cuda_runtime_api.h>

namespace twinfer::cuda {

class RelaxedCaptureScope {
 public:
  RelaxedCaptureScope() {
    // A failed exchange leaves the mode as it was: nothing to restore, and
    // the error is not left for the next check to blame on something else.
    swapped_ = cudaThreadExchangeStreamCaptureMode(&mode_) == cudaSuccess;
    if (!swapped_) cudaGetLastError();
  }
  ~RelaxedCaptureScope() {
    if (swapped_ && cudaThreadExchangeStreamCaptureMode(&mode_) != cudaSuccess) cudaGetLastError();
  }
  RelaxedCaptureScope(const RelaxedCaptureScope&) = delete;
  RelaxedCaptureScope& operator=(const RelaxedCaptureScope&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
  bool swapped_ = false;
};

}  // namespace twinfer::cuda
