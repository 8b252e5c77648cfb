// How much host memory a new allocation may take before it is refused.
//
// Linux overcommits: malloc of more than the machine can back succeeds, and
// the process is killed by the kernel's out-of-memory killer when the pages
// are touched, with no Python exception and no chance to recover (a Loop
// whose state doubles each iteration did this). Large host allocations are
// therefore checked against the memory the system (or the container's
// cgroup) can still give, and refused as Error(kOutOfMemory) naming the size.
#pragma once
#include <cstddef>
#include <cstdint>

namespace twinfer {

// Bytes the kernel reports it could still give this process without
// killing anything: MemAvailable + SwapFree from /proc/meminfo, capped by
// what the process's cgroup v2 and those above it leave (memory.max less
// memory.current, reclaimable inactive file pages not counted as used).
// UINT64_MAX where neither is readable (not Linux).
uint64_t host_bytes_available();

// Allocations at least this large are checked (smaller ones cannot be what
// tips a process into the killer on their own, and reading /proc per
// allocation would cost more than the allocation).
constexpr size_t kCheckedHostAllocation = size_t(64) << 20;

// Throws Error(kOutOfMemory) when `bytes` (>= kCheckedHostAllocation) is more
// than host_bytes_available() plus `reclaimable` (memory the caller would
// give back first, such as a block cache). `what` names the allocation.
// Returns the host_bytes_available() it compared with (UINT64_MAX when
// unchecked).
uint64_t check_host_allocation(size_t bytes, size_t reclaimable, const char* what);

// TWINFER_HOST_MEMORY_LIMIT_MB: the most host memory twinfer's allocator may
// hold at once (live tensors and its block cache), 0 or unset for none. A
// service sets it to fail a request with OutOfMemoryError rather than grow.
uint64_t host_memory_limit();

}  // namespace twinfer
