#include "backends/cuda/error_flag.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <string>

#include "backends/cuda/cuda_check.h"
#include "core/error.h"

namespace twinfer::cuda {

namespace {

volatile int* new_flag() {
  void* p = nullptr;
  // Mapped page-locked memory: with unified addressing the host pointer is
  // the device pointer too.
  check(cudaHostAlloc(&p, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable), "cudaHostAlloc(error flag)");
  auto* f = static_cast<volatile int*>(p);
  *f = kNoKernelError;
  return f;
}

void raise_if_set(volatile int* f, int device) {
  const int code = *f;
  if (code == kNoKernelError) return;
  *f = kNoKernelError;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  switch (code) {
    case kIndexOutOfRange:
      throw Error(ErrorKind::kInvalidArgument,
                  "an index was out of range (an indexed read or write: Gather, Scatter, ReverseSequence, MaxUnpool, "
                  "RoiAlign, RotaryEmbedding, Attention's padding lengths, RNN/GRU/LSTM sequence_lens, on cuda:" +
                      std::to_string(device) + ")");
    case kTargetOutOfRange:
      throw Error(ErrorKind::kInvalidArgument,
                  "a target was out of range [0, C) and not ignore_index (a NegativeLogLikelihoodLoss or "
                  "SoftmaxCrossEntropyLoss on cuda:" + std::to_string(device) + ")");
    case kAxisOutOfRange:
      throw Error(ErrorKind::kInvalidArgument,
                  "an axis given at run time was out of range for its input's rank (a CumSum or CumProd on cuda:" +
                      std::to_string(device) + ")");
    case kFloatZeroPoint:
      throw Error(ErrorKind::kInvalidArgument,
                  "a float8/float4 zero point must be zero (a QuantizeLinear or DequantizeLinear on cuda:" +
                      std::to_string(device) + ")");
    default:
      throw Error(ErrorKind::kRuntime, "a kernel on cuda:" + std::to_string(device) + " reported error " +
                                           std::to_string(code));
  }
}

}  // namespace

std::shared_ptr<void> create_kernel_error_flag(int device) {
  (void)device;  // portable pinned memory: any device's kernels may write it
  volatile int* f = new_flag();
  return std::shared_ptr<void>(const_cast<int*>(f), [](void* p) {
    if (cudaFreeHost(p) != cudaSuccess) cudaGetLastError();
  });
}

int* kernel_error_flag(void* backend_state) {
  if (!backend_state)
    throw Error(ErrorKind::kRuntime, "a CUDA kernel that reports data errors ran without its context's error flag");
  return static_cast<int*>(backend_state);
}

void check_kernel_errors(int device, void* flag) {
  if (flag) raise_if_set(static_cast<volatile int*>(flag), device);
}

}  // namespace twinfer::cuda
