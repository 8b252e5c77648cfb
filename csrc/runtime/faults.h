// Fault injection for the simulated device's own tests: the runtime skips
// one of its duties on purpose, so a test can prove the simulator catches
// that bug (twinfer.testing.inject_faults). Ignored on every real device.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"

namespace twinfer {

enum class Fault : uint32_t {
  kCopy = 1u << 0,        // placement inserts no host<->device copies
  kEventWait = 1u << 1,   // runs do not wait for their inputs' ready events
  kHostSync = 1u << 2,    // the host reads device results without synchronising
  kGraphInput = 1u << 3,  // graph replays do not refresh their input buffers
};

bool fault_injected(Fault f, Device d);
void set_injected_faults(const std::vector<std::string>& names);  // "copy", "event_wait", ...
std::vector<std::string> injected_faults();

}  // namespace twinfer
