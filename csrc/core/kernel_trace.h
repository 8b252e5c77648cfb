// Per-kernel spans for concurrency profiles (Parallel/Pipeline
// .profile(kernels=True)): which kernels ran on which stream, when, on the
// device's own clock. CUDA collects them from CUPTI's activity records
// (backends/cuda/kernel_trace.cc); the simulated device notes each kernel
// task its workers run. One trace at a time per device (CUPTI's activity
// buffers are process-wide).
#pragma once
#include <cstdint>
#include <string>

namespace twinfer {

struct KernelSpan {
  std::string name;     // the kernel's (CUDA: mangled symbol; sim: node and op)
  uint64_t stream = 0;  // the stream's trace key (DeviceApi::trace_stream_key)
  uint64_t start_ns = 0, end_ns = 0;  // on the trace clock (DeviceApi::trace_clock_ns)
};

}  // namespace twinfer
