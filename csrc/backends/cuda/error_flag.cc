#include "backends/cuda/error_flag.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "core/error.h"

namespace twinfer::cuda {

namespace {
std::mutex g_mutex;
std::vector<volatile int*>* g_flags = new std::vector<volatile int*>();  // never freed: kernels may still write
}  // namespace

int* kernel_error_flag(int device) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_flags->size() <= static_cast<size_t>(device)) g_flags->resize(device + 1, nullptr);
  volatile int*& f = (*g_flags)[device];
  if (!f) {
    void* p = nullptr;
    // Mapped page-locked memory: with unified addressing the host pointer is
    // the device pointer too.
    check(cudaHostAlloc(&p, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable), "cudaHostAlloc(error flag)");
    f = static_cast<volatile int*>(p);
    *f = kNoKernelError;
  }
  return const_cast<int*>(f);
}

void check_kernel_errors(int device) {
  volatile int* f = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (static_cast<size_t>(device) < g_flags->size()) f = (*g_flags)[device];
  }
  if (!f) return;
  const int code = *f;
  if (code == kNoKernelError) return;
  *f = kNoKernelError;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  switch (code) {
    case kIndexOutOfRange:
      throw Error(ErrorKind::kInvalidArgument,
                  "an index was out of range (a Gather on cuda:" + std::to_string(device) + ")");
    default:
      throw Error(ErrorKind::kRuntime, "a kernel on cuda:" + std::to_string(device) + " reported error " +
                                           std::to_string(code));
  }
}

}  // namespace twinfer::cuda
