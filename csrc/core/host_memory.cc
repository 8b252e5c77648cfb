#include "core/host_memory.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"

namespace twinfer {

namespace {

// A "Key:   123 kB" line of /proc/meminfo, in bytes; false if absent.
bool meminfo_field(const char* text, const char* key, uint64_t& bytes) {
  const char* p = std::strstr(text, key);
  if (!p) return false;
  p += std::strlen(key);
  char* end = nullptr;
  const unsigned long long kb = std::strtoull(p, &end, 10);
  if (end == p) return false;
  bytes = static_cast<uint64_t>(kb) * 1024;
  return true;
}

// The whole of a small file (a /proc or /sys entry); empty if unreadable.
std::string read_small_file(const char* path) {
  std::string out;
  if (FILE* f = std::fopen(path, "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    std::fclose(f);
  }
  return out;
}

// memory.max - memory.current of this process's cgroup (v2), or UINT64_MAX
// when it has no limit or no cgroup v2 is mounted where we look.
uint64_t cgroup_bytes_left() {
  const std::string self = read_small_file("/proc/self/cgroup");
  // v2 has a single line "0::/path".
  const size_t at = self.find("0::");
  if (at == std::string::npos) return UINT64_MAX;
  std::string path = self.substr(at + 3);
  path = path.substr(0, path.find('\n'));
  const std::string dir = "/sys/fs/cgroup" + (path == "/" ? std::string() : path);
  const std::string max = read_small_file((dir + "/memory.max").c_str());
  if (max.empty() || max.compare(0, 3, "max") == 0) return UINT64_MAX;
  const std::string cur = read_small_file((dir + "/memory.current").c_str());
  if (cur.empty()) return UINT64_MAX;
  const uint64_t limit = std::strtoull(max.c_str(), nullptr, 10);
  const uint64_t used = std::strtoull(cur.c_str(), nullptr, 10);
  return used >= limit ? 0 : limit - used;
}

}  // namespace

uint64_t host_bytes_available() {
  const std::string info = read_small_file("/proc/meminfo");
  uint64_t available = 0, swap = 0;
  uint64_t system = UINT64_MAX;
  if (meminfo_field(info.c_str(), "MemAvailable:", available)) {
    meminfo_field(info.c_str(), "SwapFree:", swap);
    system = available + swap;
  }
  const uint64_t cgroup = cgroup_bytes_left();
  return system < cgroup ? system : cgroup;
}

uint64_t check_host_allocation(size_t bytes, size_t reclaimable, const char* what) {
  if (bytes < kCheckedHostAllocation) return UINT64_MAX;
  const uint64_t available = host_bytes_available();
  if (available == UINT64_MAX || bytes <= available + reclaimable) return available;
  throw Error(ErrorKind::kOutOfMemory, std::string("out of host memory: ") + what + " needs " + std::to_string(bytes) +
                                           " bytes and the system has " + std::to_string(available + reclaimable) +
                                           " available (allocating it would get the process killed)");
}

uint64_t host_memory_limit() {
  static const uint64_t limit = [] {
    const char* env = std::getenv("TWINFER_HOST_MEMORY_LIMIT_MB");
    return env ? static_cast<uint64_t>(std::strtoull(env, nullptr, 10)) << 20 : uint64_t(0);
  }();
  return limit;
}

}  // namespace twinfer
