// Grid shapes for the device's elementwise kernels, decided on the host (and
// tested there, tests/test_index_math.py): grid-stride loops, so any n fits
// in a bounded grid.
#pragma once
#include <algorithm>
#include <cstdint>

namespace twinfer::ew {

struct LaunchConfig {
  uint32_t blocks = 0;   // 0: nothing to launch
  uint32_t threads = 0;
};

// `threads` per block (a multiple of 32, at most 1024), blocks enough to give
// each thread one element, at most `max_blocks` (each thread then loops).
inline LaunchConfig elementwise_launch(int64_t n, uint32_t threads = 256, uint32_t max_blocks = 1u << 20) {
  LaunchConfig c;
  if (n <= 0) return c;
  c.threads = threads;
  const uint64_t need = (static_cast<uint64_t>(n) + threads - 1) / threads;
  c.blocks = static_cast<uint32_t>(std::min<uint64_t>(need, max_blocks));
  return c;
}

}  // namespace twinfer::ew
