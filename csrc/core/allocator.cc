#include "core/allocator.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <map>
#include <mutex>
#include <new>
#include <string>

#include "core/device_api.h"
#include "core/error.h"
#include "core/host_memory.h"

namespace twinfer {

namespace {

// Host memory, 64-byte aligned. Large blocks (>= 64 KiB) freed by twinfer
// are kept in a cache and handed out again: a fresh large block is fresh
// pages from the OS, and touching them costs page faults on every run (an
// engine's 6.5 MB output took ~5 ms to hand back, mostly faults). Block
// sizes are rounded up to 8 steps per power of two (<= 12.5% slack), so
// blocks of similar size are reused. The cache holds at most
// TWINFER_CPU_CACHE_MB (default 512) and drops its oldest blocks beyond.
// A new large block is refused (kOutOfMemory) when the system could not back
// it (core/host_memory.h) or when it would take what twinfer holds past
// TWINFER_HOST_MEMORY_LIMIT_MB; the cache is given back first either way.
class CpuAllocator final : public Allocator {
 public:
  CpuAllocator() {
    const char* env = std::getenv("TWINFER_CPU_CACHE_MB");
    limit_ = (env ? static_cast<size_t>(std::strtoull(env, nullptr, 10)) : size_t(512)) << 20;
  }
  ~CpuAllocator() override {
    for (auto& kv : free_) std::free(kv.second);
  }

  void* allocate(size_t bytes) override {
    const size_t size = size_class(bytes);
    if (size >= kMinCached) {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.find(size);
      if (it != free_.end()) {
        void* p = it->second;
        free_.erase(it);
        cached_ -= size;
        live_ += size;
        return p;
      }
    }
    if (size >= kMinCached) reserve(size, bytes);
    void* p = std::aligned_alloc(64, size);
    if (!p) {
      release_cache();  // give the cache back and try once more
      p = std::aligned_alloc(64, size);
    }
    if (!p) {
      if (size >= kMinCached) unreserve(size);
      throw Error(ErrorKind::kOutOfMemory, "out of host memory allocating " + std::to_string(bytes) + " bytes");
    }
    return p;
  }

  void deallocate(void* p, size_t bytes) override {
    const size_t size = size_class(bytes);
    if (size < kMinCached) return std::free(p);
    std::lock_guard<std::mutex> lock(mutex_);
    live_ -= size;
    if (size > limit_) return std::free(p);
    free_.emplace(size, p);
    cached_ += size;
    while (cached_ > limit_ && !free_.empty()) {  // drop the largest blocks first
      auto last = std::prev(free_.end());
      cached_ -= last->first;
      std::free(last->second);
      free_.erase(last);
    }
  }

  Device device() const override { return Device::cpu(); }

 private:
  static constexpr size_t kMinCached = size_t(64) << 10;

  static size_t size_class(size_t bytes) {
    size_t n = std::max<size_t>((bytes + 63) / 64 * 64, 64);
    if (n < kMinCached) return n;
    size_t top = size_t(1) << (63 - __builtin_clzll(n));  // highest power of two <= n
    size_t step = top / 8;
    return (n + step - 1) / step * step;
  }

  // Counts a new block of `size` as held, after the checks that refuse it.
  void reserve(size_t size, size_t bytes) {
    std::unique_lock<std::mutex> lock(mutex_);
    const uint64_t cap = host_memory_limit();
    if (cap && live_ + cached_ + size > cap) {
      drop_cache_locked();
      if (live_ + size > cap)
        throw Error(ErrorKind::kOutOfMemory, "out of host memory allocating " + std::to_string(bytes) + " bytes: " +
                                                 std::to_string(live_) + " of TWINFER_HOST_MEMORY_LIMIT_MB's " +
                                                 std::to_string(cap) + " bytes are in use");
    }
    // Counted before the lock is let go below: threads reserving at once
    // each see the others' blocks against the cap.
    live_ += size;
    if (size >= kCheckedHostAllocation) {
      const size_t reclaimable = cached_;
      lock.unlock();  // reads /proc; other threads' small blocks go on
      uint64_t available = 0;
      try {
        available = check_host_allocation(size, reclaimable, "a tensor");
      } catch (...) {
        unreserve(size);
        throw;
      }
      lock.lock();
      if (size > available) drop_cache_locked();  // it fits only with the cache given back
    }
  }

  void unreserve(size_t size) {
    std::lock_guard<std::mutex> lock(mutex_);
    live_ -= size;
  }

  void drop_cache_locked() {
    for (auto& kv : free_) std::free(kv.second);
    free_.clear();
    cached_ = 0;
  }

  void release_cache() {
    std::lock_guard<std::mutex> lock(mutex_);
    drop_cache_locked();
  }

  std::mutex mutex_;
  std::multimap<size_t, void*> free_;
  size_t cached_ = 0;
  size_t live_ = 0;  // bytes of cached-size-class blocks handed out and not yet given back
  size_t limit_ = 0;
};


}  // namespace

Allocator& cpu_allocator() {
  static CpuAllocator a;
  return a;
}

Allocator& allocator_for(Device d) {
  if (d.is_cpu()) return cpu_allocator();
  return device_api(d).allocator();
}

std::shared_ptr<Storage> Storage::allocate(Allocator& a, size_t bytes) {
  auto s = std::make_shared<Storage>(Key{});
  s->data_ = a.allocate(bytes);
  s->bytes_ = bytes;
  s->device_ = a.device();
  s->owner_ = &a;
  return s;
}

std::shared_ptr<Storage> Storage::allocate_on(Allocator& a, size_t bytes, std::shared_ptr<Stream> stream) {
  if (!stream) return allocate(a, bytes);
  auto s = std::make_shared<Storage>(Key{});
  s->data_ = a.allocate_async(bytes, *stream);
  s->bytes_ = bytes;
  s->device_ = a.device();
  s->owner_ = &a;
  s->stream_ = std::move(stream);
  return s;
}

void Storage::record_use(std::shared_ptr<Event> e, const void* user) {
  if (!e || e->captured()) return;  // a graph's use is ordered by its launches
  std::lock_guard<std::mutex> lock(uses_mutex_);
  for (auto& u : uses_)
    if (u.second == e || (user && u.first == user)) {
      u = {user, std::move(e)};
      return;
    }
  uses_.emplace_back(user, std::move(e));
}

std::shared_ptr<Storage> Storage::borrow(void* data, size_t bytes, Device device,
                                         std::shared_ptr<void> keep_alive) {
  auto s = std::make_shared<Storage>(Key{});
  s->data_ = data;
  s->bytes_ = bytes;
  s->device_ = device;
  s->keep_alive_ = std::move(keep_alive);
  return s;
}

Storage::~Storage() {
  if (!owner_ || !data_) return;
  if (!stream_) {
    owner_->deallocate(data_, bytes_);
    return;
  }
  // A destructor must not throw: a failing wait or free (a device already
  // in error) leaks the block rather than taking the process down.
  try {
    for (auto& u : uses_) stream_->wait(*u.second);
    owner_->deallocate_async(data_, bytes_, *stream_);
  } catch (...) {
  }
}

}  // namespace twinfer
