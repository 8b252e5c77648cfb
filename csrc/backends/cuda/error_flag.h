// Errors a kernel finds in the data (an index out of range) cannot be thrown
// from the device, and a device-side trap would poison the whole CUDA
// context. Kernels write a code to a page-locked, device-mapped flag
// instead; the runtime reads it at its synchronisation points
// (DeviceApi::check_kernel_errors) and raises a twinfer error there.
//
// Each execution context has its own flag (KernelContext::backend_state
// carries it to the kernels), so the run that caused an error is the one
// that raises it, not whichever context on the device synchronises first.
#pragma once
#include <memory>

namespace twinfer::cuda {

enum KernelError : int {
  kNoKernelError = 0,
  kIndexOutOfRange = 1,   // Gather, Scatter*, MaxUnpool
  kTargetOutOfRange = 2,  // NegativeLogLikelihoodLoss / SoftmaxCrossEntropyLoss
  kAxisOutOfRange = 3,    // an axis read on the device (CumSum / CumProd)
  kFloatZeroPoint = 4,    // a nonzero float8/float4 zero point (QuantizeLinear / DequantizeLinear)
};

// A new flag for one execution context on `device` (freed when the last
// reference goes; the context has synchronised by then).
std::shared_ptr<void> create_kernel_error_flag(int device);
// The flag a kernel writes: its context's (`KernelContext::backend_state`;
// every device run has one, and a kernel without it throws kRuntime rather
// than lose an error).
int* kernel_error_flag(void* backend_state);
// Reads and clears `flag` (null: nothing); throws Error(kInvalidArgument)
// when a kernel set it.
void check_kernel_errors(int device, void* flag);

}  // namespace twinfer::cuda
