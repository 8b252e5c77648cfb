#include "ops/random/random_stream.h"

#include <cstring>

namespace twinfer::random {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

RandomStream::RandomStream(const graph::Node& n) {
  if (n.has_attr("seed")) {
    // The seed is a float attribute: its bits, so 1.0 and 1.5 differ.
    const float s = n.attr_float("seed", 0.f);
    uint32_t bits;
    std::memcpy(&bits, &s, sizeof(bits));
    seed_ = splitmix64(bits);
  } else {
    std::random_device rd;
    seed_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
}

std::mt19937_64 RandomStream::next() const {
  const uint64_t run = runs_.fetch_add(1, std::memory_order_relaxed);
  return std::mt19937_64(splitmix64(seed_ ^ splitmix64(run)));
}

}  // namespace twinfer::random
