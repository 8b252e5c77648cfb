// Where memory lives: the host, or a CUDA device by ordinal.
#pragma once
#include <string>

namespace twinfer {

enum class DeviceType { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  std::string str() const {
    return type == DeviceType::kCPU ? "cpu" : "cuda:" + std::to_string(index);
  }
  static Device cpu() { return {}; }
  static Device cuda(int i) { return {DeviceType::kCUDA, i}; }
};

}  // namespace twinfer
