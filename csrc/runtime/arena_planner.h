// Offsets in one arena for values with known sizes and lifetimes, so values
// that are never alive at the same time share memory. Greedy by size: the
// largest buffers are placed first at the lowest offset that does not overlap
// any placed buffer whose lifetime intersects.
#pragma once
#include <cstddef>
#include <vector>

namespace twinfer {

struct BufferRequest {
  size_t bytes;
  int first_step;  // step that writes it
  int last_step;   // last step that reads it
};

struct ArenaLayout {
  std::vector<size_t> offsets;  // one per request
  size_t arena_bytes = 0;       // peak
  size_t naive_bytes = 0;       // sum of all requests (what no reuse would need)
};

constexpr size_t kArenaAlignment = 64;         // host: AVX-512 and oneDNN's preference
constexpr size_t kDeviceArenaAlignment = 256;  // device: what cudaMalloc guarantees

ArenaLayout plan_arena(const std::vector<BufferRequest>& requests, size_t alignment = kArenaAlignment);

}  // namespace twinfer
