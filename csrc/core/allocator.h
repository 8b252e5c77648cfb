// Memory is owned by allocators. A Storage is a block handed out by one;
// its destructor returns the block. Tensors share Storage through shared_ptr.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>

#include "core/device.h"

namespace twinfer {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes) = 0;  // throws Error(kOutOfMemory) on failure
  virtual void deallocate(void* p, size_t bytes) = 0;
  virtual Device device() const = 0;
};

// 64-byte aligned host memory (fits AVX-512 and oneDNN's preferences).
Allocator& cpu_allocator();

// Register the allocator for a device type (the CUDA backend does this at start-up).
void register_allocator(DeviceType type, std::function<Allocator&(int index)> get);
Allocator& allocator_for(Device d);  // throws Error(kDevice) when none is registered

// A block of memory, either owned (returned to its allocator on destruction)
// or borrowed from a foreign owner (kept alive by `keep_alive`, e.g. a DLPack
// capsule or a memory-mapped file).
class Storage {
 public:
  static std::shared_ptr<Storage> allocate(Allocator& a, size_t bytes);
  static std::shared_ptr<Storage> borrow(void* data, size_t bytes, Device device,
                                         std::shared_ptr<void> keep_alive);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  Storage() = default;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
  Allocator* owner_ = nullptr;          // set when we own the block
  std::shared_ptr<void> keep_alive_;    // set when we borrow it
};

}  // namespace twinfer
