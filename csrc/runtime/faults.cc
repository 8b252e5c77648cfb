#include "runtime/faults.h"

#include <atomic>

#include "core/error.h"

namespace twinfer {

namespace {
std::atomic<uint32_t> g_faults{0};

const std::pair<const char*, Fault> kNames[] = {
    {"copy", Fault::kCopy}, {"event_wait", Fault::kEventWait},
    {"host_sync", Fault::kHostSync}, {"graph_input", Fault::kGraphInput}};
}  // namespace

bool fault_injected(Fault f, Device d) {
  return d.is_sim() && (g_faults.load(std::memory_order_relaxed) & static_cast<uint32_t>(f)) != 0;
}

void set_injected_faults(const std::vector<std::string>& names) {
  uint32_t mask = 0;
  for (const auto& n : names) {
    bool known = false;
    for (const auto& kv : kNames)
      if (n == kv.first) {
        mask |= static_cast<uint32_t>(kv.second);
        known = true;
      }
    if (!known) throw Error(ErrorKind::kInvalidArgument, "unknown fault '" + n + "'");
  }
  g_faults = mask;
}

std::vector<std::string> injected_faults() {
  std::vector<std::string> r;
  const uint32_t m = g_faults.load();
  for (const auto& kv : kNames)
    if (m & static_cast<uint32_t>(kv.second)) r.push_back(kv.first);
  return r;
}

}  // namespace twinfer
