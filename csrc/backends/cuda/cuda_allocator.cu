// Device memory for tensors and arenas, one allocator per GPU. Registered
// with the core at load so Tensor::empty(..., Device::cuda(i)) works.
#include <memory>
#include <mutex>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "core/allocator.h"

namespace twinfer::cuda {

namespace {

class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(int index) : index_(index) {}
  void* allocate(size_t bytes) override {
    int prev = 0;
    check(cudaGetDevice(&prev), "cudaGetDevice");
    check(cudaSetDevice(index_), "cudaSetDevice");
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    cudaSetDevice(prev);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw Error(ErrorKind::kOutOfMemory, "out of memory on cuda:" + std::to_string(index_) + " allocating " +
                                               std::to_string(bytes) + " bytes");
    }
    check(e, "cudaMalloc");
    return p;
  }
  void deallocate(void* p, size_t) override { cudaFree(p); }
  Device device() const override { return Device::cuda(index_); }

 private:
  int index_;
};

Allocator& allocator_for_index(int index) {
  static std::mutex m;
  static std::vector<std::unique_ptr<CudaAllocator>> allocators;
  std::lock_guard<std::mutex> lock(m);
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    count = 0;
  }
  if (index < 0 || index >= count)
    throw Error(ErrorKind::kDevice, "no CUDA device cuda:" + std::to_string(index) + " (" + std::to_string(count) +
                                        " visible)");
  if (allocators.size() < static_cast<size_t>(count)) allocators.resize(count);
  if (!allocators[index]) allocators[index] = std::make_unique<CudaAllocator>(index);
  return *allocators[index];
}

struct Registrar {
  Registrar() { register_allocator(DeviceType::kCUDA, allocator_for_index); }
} registrar;

}  // namespace

}  // namespace twinfer::cuda
