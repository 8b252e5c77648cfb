// Errors a kernel finds in the data (an index out of range) cannot be thrown
// from the device, and a device-side trap would poison the whole CUDA
// context. Kernels write a code to a page-locked, device-mapped flag
// instead; the runtime reads it at its synchronisation points
// (DeviceApi::check_kernel_errors) and raises a twinfer error there.
#pragma once

namespace twinfer::cuda {

enum KernelError : int {
  kNoKernelError = 0,
  kIndexOutOfRange = 1,  // Gather
};

// The flag for kernels on `device` (a device-visible pointer).
int* kernel_error_flag(int device);
// Reads and clears the flag; throws Error(kInvalidArgument) if a kernel set it.
void check_kernel_errors(int device);

}  // namespace twinfer::cuda
