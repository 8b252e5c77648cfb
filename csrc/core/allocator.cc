#include "core/allocator.h"

#include <cstdlib>
#include <mutex>
#include <new>
#include <string>

#include "core/error.h"

namespace twinfer {

namespace {

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded ? rounded : 64);
    if (!p)
      throw Error(ErrorKind::kOutOfMemory,
                  "out of host memory allocating " + std::to_string(bytes) + " bytes");
    return p;
  }
  void deallocate(void* p, size_t) override { std::free(p); }
  Device device() const override { return Device::cpu(); }
};

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::function<Allocator&(int)>& cuda_getter() {
  static std::function<Allocator&(int)> g;
  return g;
}

}  // namespace

Allocator& cpu_allocator() {
  static CpuAllocator a;
  return a;
}

void register_allocator(DeviceType type, std::function<Allocator&(int index)> get) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  if (type == DeviceType::kCUDA) cuda_getter() = std::move(get);
}

Allocator& allocator_for(Device d) {
  if (d.is_cpu()) return cpu_allocator();
  std::lock_guard<std::mutex> lock(registry_mutex());
  if (!cuda_getter())
    throw Error(ErrorKind::kDevice, "device " + d.str() + " is not available in this build");
  return cuda_getter()(d.index);
}

std::shared_ptr<Storage> Storage::allocate(Allocator& a, size_t bytes) {
  std::shared_ptr<Storage> s(new Storage());
  s->data_ = a.allocate(bytes);
  s->bytes_ = bytes;
  s->device_ = a.device();
  s->owner_ = &a;
  return s;
}

std::shared_ptr<Storage> Storage::borrow(void* data, size_t bytes, Device device,
                                         std::shared_ptr<void> keep_alive) {
  std::shared_ptr<Storage> s(new Storage());
  s->data_ = data;
  s->bytes_ = bytes;
  s->device_ = device;
  s->keep_alive_ = std::move(keep_alive);
  return s;
}

Storage::~Storage() {
  if (owner_ && data_) owner_->deallocate(data_, bytes_);
}

}  // namespace twinfer
