// Where memory lives: the host, a CUDA device by ordinal, or the simulated
// device (a CPU stand-in for a GPU that tests the GPU runtime without one;
// see backends/sim/sim_device.h).
#pragma once
#include <string>

namespace twinfer {

enum class DeviceType { kCPU, kCUDA, kSim };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  bool is_sim() const { return type == DeviceType::kSim; }
  // A GPU or its stand-in: memory the host does not read directly, streams.
  bool is_accelerator() const { return type != DeviceType::kCPU; }
  std::string str() const {
    switch (type) {
      case DeviceType::kCPU: return "cpu";
      case DeviceType::kCUDA: return "cuda:" + std::to_string(index);
      case DeviceType::kSim: return "sim:" + std::to_string(index);
    }
    return "cpu";
  }
  static Device cpu() { return {}; }
  static Device cuda(int i) { return {DeviceType::kCUDA, i}; }
  static Device sim(int i) { return {DeviceType::kSim, i}; }
};

}  // namespace twinfer
