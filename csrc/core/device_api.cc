#include "core/device_api.h"

#include <map>
#include <mutex>

#include "core/error.h"

namespace twinfer {

const char* memory_space_name(MemorySpace s) {
  switch (s) {
    case MemorySpace::kHost: return "host";
    case MemorySpace::kPinned: return "pinned host";
    case MemorySpace::kDevice: return "device";
  }
  return "host";
}

void wait_across_capture(Stream& s, Event& e) {
  if (e.capture_sequence() == s.capture_sequence()) s.wait(e);
}

void host_wait(Event& e) {
  if (!e.captured()) e.synchronize();
}

std::shared_ptr<Stream> DeviceApi::create_partitioned_stream(int, double) {
  throw Error(ErrorKind::kDevice, name() + " cannot run a stream on a share of its SMs (sm_share)");
}

void DeviceApi::start_kernel_trace() { throw Error(ErrorKind::kDevice, name() + " cannot trace its kernels"); }

namespace {
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::map<DeviceType, std::function<DeviceApi&(int)>>& registry() {
  static std::map<DeviceType, std::function<DeviceApi&(int)>> r;
  return r;
}
}  // namespace

void register_device_api(DeviceType type, std::function<DeviceApi&(int index)> get) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry()[type] = std::move(get);
}

bool has_device_api(DeviceType type) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  return registry().count(type) != 0;
}

DeviceApi& device_api(Device d) {
  std::function<DeviceApi&(int)> get;
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    auto it = registry().find(d.type);
    if (it != registry().end()) get = it->second;
  }
  if (!get) {
    if (d.is_cpu()) throw Error(ErrorKind::kDevice, "the CPU has no device API (it runs kernels directly)");
    throw Error(ErrorKind::kDevice, "device " + d.str() + " is not available in this build" +
                                        (d.is_cuda() ? " (built without the CUDA backend)" : ""));
  }
  return get(d.index);  // throws kDevice for an index the machine lacks
}

}  // namespace twinfer
