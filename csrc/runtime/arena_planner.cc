#include "runtime/arena_planner.h"

#include <algorithm>
#include <numeric>

namespace twinfer {

static size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

ArenaLayout plan_arena(const std::vector<BufferRequest>& requests, size_t alignment) {
  ArenaLayout layout;
  const size_t n = requests.size();
  layout.offsets.assign(n, 0);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return requests[a].bytes > requests[b].bytes;
  });
  struct Placed { size_t offset, bytes; int first, last; };
  std::vector<Placed> placed;
  placed.reserve(n);
  for (size_t idx : order) {
    const auto& r = requests[idx];
    const size_t bytes = align_up(std::max<size_t>(r.bytes, 1), alignment);
    layout.naive_bytes += bytes;
    // Buffers alive at the same time, sorted by offset; take the first gap that fits.
    std::vector<const Placed*> overlapping;
    for (const auto& p : placed)
      if (p.first <= r.last_step && r.first_step <= p.last) overlapping.push_back(&p);
    std::sort(overlapping.begin(), overlapping.end(),
              [](const Placed* a, const Placed* b) { return a->offset < b->offset; });
    size_t offset = 0;
    for (const Placed* p : overlapping) {
      if (offset + bytes <= p->offset) break;
      offset = std::max(offset, p->offset + p->bytes);
    }
    placed.push_back({offset, bytes, r.first_step, r.last_step});
    layout.offsets[idx] = offset;
    layout.arena_bytes = std::max(layout.arena_bytes, offset + bytes);
  }
  return layout;
}

}  // namespace twinfer
