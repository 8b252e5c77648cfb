#include "core/host_memory.h"

#include <algorithm>
#include <cctype>
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

// The memory this process's cgroup (v2) and every cgroup above it may still
// take: the least of memory.max - (memory.current - inactive_file), as the
// kubelet counts a working set (file pages not recently used are reclaimed
// before anything is killed; counting them, a container that has read its
// weights would refuse every large tensor). UINT64_MAX when none has a limit
// or no cgroup v2 is mounted where we look.
uint64_t cgroup_bytes_left() {
  const std::string self = read_small_file("/proc/self/cgroup");
  const size_t at = self.find("0::");  // v2 has a single line "0::/path"
  if (at == std::string::npos) return UINT64_MAX;
  std::string path = self.substr(at + 3);
  path = path.substr(0, path.find('\n'));
  uint64_t left = UINT64_MAX;
  for (;;) {
    const std::string dir = "/sys/fs/cgroup" + (path == "/" ? std::string() : path);
    const std::string max = read_small_file((dir + "/memory.max").c_str());
    if (!max.empty() && max.compare(0, 3, "max") != 0) {
      const std::string cur = read_small_file((dir + "/memory.current").c_str());
      if (!cur.empty()) {
        const uint64_t limit = std::strtoull(max.c_str(), nullptr, 10);
        uint64_t used = std::strtoull(cur.c_str(), nullptr, 10);
        uint64_t inactive = 0;
        const std::string stat = read_small_file((dir + "/memory.stat").c_str());
        const size_t f = stat.find("inactive_file ");
        if (f != std::string::npos && (f == 0 || stat[f - 1] == '\n'))
          inactive = std::strtoull(stat.c_str() + f + 14, nullptr, 10);
        used -= std::min(used, inactive);
        const uint64_t here = used >= limit ? 0 : limit - used;
        if (here < left) left = here;
      }
    }
    if (path.empty() || path == "/") break;
    const size_t slash = path.find_last_of('/');
    path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
  }
  return left;
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
    // Unset, empty or 0: no limit; a value that is not a whole number of MB
    // (twinfer's import warns of it) too. Capped so the shift cannot wrap.
    const char* env = std::getenv("TWINFER_HOST_MEMORY_LIMIT_MB");
    if (!env) return uint64_t(0);
    while (std::isspace(static_cast<unsigned char>(*env))) ++env;
    if (!std::isdigit(static_cast<unsigned char>(*env))) return uint64_t(0);  // "-5" would wrap in strtoull
    char* end = nullptr;
    const unsigned long long mb = std::strtoull(env, &end, 10);
    while (std::isspace(static_cast<unsigned char>(*end))) ++end;
    if (*end) return uint64_t(0);
    return static_cast<uint64_t>(std::min<unsigned long long>(mb, 1ull << 40)) << 20;
  }();
  return limit;
}

}  // namespace twinfer
