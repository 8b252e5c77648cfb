// Kernel spans on CUDA from CUPTI's activity API (core/kernel_trace.h):
// CONCURRENT_KERNEL records, which carry each kernel's start and end on the
// GPU's timestamp clock, its context and its stream. libcupti is opened with
// dlopen on first use (NVIDIA's wheel, found by Python like cuBLASLt), so
// twinfer imports and runs without it; only a trace needs it.
#pragma once
#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

#include "core/kernel_trace.h"

namespace twinfer::cuda {

// Throws Error(kDevice) naming why when CUPTI cannot trace (not found, an
// older driver, another trace running).
void start_kernel_trace();
// Flushes CUPTI's buffers (the caller has synchronised) and stops.
std::vector<KernelSpan> stop_kernel_trace();
uint64_t trace_clock_ns();
// (context id << 32) | stream id, as the records name a stream; 0 when
// CUPTI is not loaded.
uint64_t trace_stream_key(cudaStream_t s);

}  // namespace twinfer::cuda
