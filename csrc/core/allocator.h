// Memory is owned by allocators. A Storage is a block handed out by one;
// its destructor returns the block. Tensors share Storage through shared_ptr.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "core/device.h"

namespace twinfer {

class Stream;
class Event;

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes) = 0;  // throws Error(kOutOfMemory) on failure
  virtual void deallocate(void* p, size_t bytes) = 0;
  // Stream-ordered: the block may be used by work enqueued on `s` from now
  // on, and is given back once the work enqueued on `s` before the
  // deallocation has finished (cudaMallocAsync / cudaFreeAsync). Host
  // allocators ignore the stream.
  virtual void* allocate_async(size_t bytes, Stream&) { return allocate(bytes); }
  virtual void deallocate_async(void* p, size_t bytes, Stream&) { deallocate(p, bytes); }
  virtual Device device() const = 0;
};

// 64-byte aligned host memory (fits AVX-512 and oneDNN's preferences).
Allocator& cpu_allocator();

// The host allocator, or the device memory of the device's DeviceApi
// (core/device_api.h); throws Error(kDevice) when the device is not available.
Allocator& allocator_for(Device d);

// A block of memory, either owned (returned to its allocator on destruction)
// or borrowed from a foreign owner (kept alive by `keep_alive`, e.g. a DLPack
// capsule or a memory-mapped file).
class Storage {
  // Only the factories below construct a Storage; the constructor is public for
  // make_shared (block and count in one allocation: tensors are made per run).
  struct Key {
    explicit Key() = default;
  };

 public:
  explicit Storage(Key) {}
  static std::shared_ptr<Storage> allocate(Allocator& a, size_t bytes);
  // A block ordered with `stream` (Allocator::allocate_async); it is freed on
  // that stream, after every use recorded with record_use.
  static std::shared_ptr<Storage> allocate_on(Allocator& a, size_t bytes, std::shared_ptr<Stream> stream);
  static std::shared_ptr<Storage> borrow(void* data, size_t bytes, Device device,
                                         std::shared_ptr<void> keep_alive);
  ~Storage();
  // Work recorded by `e` (on another stream) uses this block: the
  // stream-ordered free waits for it. `user` (a context, a consumer's
  // stream) keeps one entry: its runs are in order, so its latest event
  // covers the earlier ones.
  void record_use(std::shared_ptr<Event> e, const void* user = nullptr);
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
  Allocator* owner_ = nullptr;          // set when we own the block
  std::shared_ptr<void> keep_alive_;    // set when we borrow it
  std::shared_ptr<Stream> stream_;      // set for stream-ordered blocks
  std::mutex uses_mutex_;
  std::vector<std::pair<const void*, std::shared_ptr<Event>>> uses_;
};

}  // namespace twinfer
