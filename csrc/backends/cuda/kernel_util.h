// What every CUDA kernel's host side needs: the stream it was given, and a
// check right after a launch (a bad configuration fails here, naming the
// kernel, instead of at some later synchronisation).
#pragma once
#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "backends/cuda/build_stream.h"
#include "backends/cuda/cuda_check.h"
#include "core/device_api.h"
#include "core/tensor.h"
#include "ops/elementwise/typeset.h"
#include "ops/kernel.h"

namespace twinfer::cuda {

inline cudaStream_t stream_of(const KernelContext& ctx) {
  if (!ctx.stream) throw Error(ErrorKind::kRuntime, "a CUDA kernel ran without a stream");
  return reinterpret_cast<cudaStream_t>(ctx.stream->handle());
}

inline void check_launch(const char* what) { check(cudaGetLastError(), what); }

// Sixteen bytes moved as one unit: a copy's run of smaller elements widened
// (movement.cu), never read as a number.
struct alignas(16) Bytes16 {
  uint64_t lo, hi;
};

// f(U{}) with U a type as wide as an element of `width` bytes, for kernels
// that move elements without reading them: the unsigned integers for 1, 2, 4
// and 8, and Bytes16 for 16 where the caller instantiates its kernels for it
// (kWith16). Any other width is Error(kDType) naming `what`, not a copy of
// the wrong size.
template <bool kWith16 = false, typename F>
void dispatch_width(size_t width, F&& f, const char* what = "a CUDA kernel") {
  switch (width) {
    case 1: f(uint8_t{}); return;
    case 2: f(uint16_t{}); return;
    case 4: f(uint32_t{}); return;
    case 8: f(uint64_t{}); return;
    case 16:
      if constexpr (kWith16) {
        f(Bytes16{});
        return;
      }
      break;
    default: break;
  }
  throw Error(ErrorKind::kDType, std::string(what) + " has no form for elements of " + std::to_string(width) + " bytes");
}

// A kernel's own constant (weights in another layout, per-channel
// parameters), copied to the current device once when the kernel is built.
inline Tensor device_copy(const void* host, DType dtype, Shape shape) {
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  Tensor t = Tensor::empty(dtype, std::move(shape), Device::cuda(dev));
  copy_to_device_now(t.data(), host, t.bytes(), "cudaMemcpyAsync (kernel constant)");
  return t;
}

// This node's CPU kernel as P, the interface through which a CPU kernel
// hands its plan to another backend (a strided copy's, Pad's index maps), so
// each op's index arithmetic is written once; null, with `why`, otherwise.
template <typename P>
std::unique_ptr<P> cpu_plan_kernel(const KernelBuildInfo& info, std::string* why) {
  const KernelBuildInfo cpu = info.for_backend(Backend::kCPU);
  const KernelDef* def = select_kernel(cpu, why);
  if (!def) return nullptr;
  std::unique_ptr<Kernel> k = def->create(cpu);
  auto* plan = dynamic_cast<P*>(k.get());
  if (!plan) {
    if (why) *why = "no plan of the CPU kernel for this node";
    return nullptr;
  }
  k.release();
  return std::unique_ptr<P>(plan);
}

inline int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

// dtypes the CUDA elementwise kernels are built for; a node of another dtype
// runs on the CPU (placement falls back and kernel_report says why).
inline constexpr unsigned kCudaElementwiseTypes = ew::kF32 | ew::kF16 | ew::kBF16 | ew::kF64 | ew::kI8 | ew::kI16 |
                                                  ew::kI32 | ew::kI64 | ew::kU8 | ew::kU16 | ew::kU32 | ew::kU64 |
                                                  ew::kBool;

}  // namespace twinfer::cuda
