// Where the random ops (RandomNormal/Uniform[Like], Bernoulli, Multinomial)
// get their numbers. A kernel is built once and then run by many threads, so
// it keeps no generator: each run takes the next number of an atomic
// counter and seeds a fresh std::mt19937_64 from (seed, counter) through
// SplitMix64. With the `seed` attribute a kernel's runs are one
// reproducible stream (the same model, built anew, gives the same first
// output, then the same second...); without it the seed comes from
// std::random_device when the kernel is built.
#pragma once
#include <atomic>
#include <cstdint>
#include <random>

#include "graph/ir.h"

namespace twinfer::random {

class RandomStream {
 public:
  explicit RandomStream(const graph::Node& n);
  // A generator for one run (call once per run).
  std::mt19937_64 next() const;

 private:
  uint64_t seed_;
  mutable std::atomic<uint64_t> runs_{0};
};

}  // namespace twinfer::random
