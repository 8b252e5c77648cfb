// twinfer._spin_probe: how long one iteration of an OpenMP spin-wait takes on
// this CPU, measured before libgomp loads (this module links neither oneDNN
// nor OpenMP). GNU OpenMP's GOMP_SPINCOUNT counts iterations, each a load and
// a pause instruction, whose cost differs between CPUs (10.4-10.9 ns measured on
// the Xeon development VM; Intel's manual gives ~140 cycles since Skylake, ~10
// before); twinfer/_libs.py turns a time budget into the count with it.
#include <pybind11/pybind11.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TWINFER_CPU_RELAX() _mm_pause()
#define TWINFER_HAVE_RELAX 1
#elif defined(__aarch64__)
#define TWINFER_CPU_RELAX() __asm__ __volatile__("yield" ::: "memory")
#define TWINFER_HAVE_RELAX 1
#else
#define TWINFER_CPU_RELAX() ((void)0)
#define TWINFER_HAVE_RELAX 0
#endif

namespace {

std::atomic<int> flag{0};  // never set: the loop runs its whole count, as a waiting thread does

// Nanoseconds per iteration of a libgomp-like spin loop (load, compare,
// relax), the least of `repeats` timings of `iterations` each; 0 where the
// CPU has no relax instruction we know.
double spin_ns(int64_t iterations, int repeats) {
  if (!TWINFER_HAVE_RELAX || iterations <= 0) return 0.0;
  double best = 0.0;
  for (int r = 0; r < std::max(1, repeats); ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < iterations; ++i) {
      if (flag.load(std::memory_order_relaxed) != 0) break;
      TWINFER_CPU_RELAX();
    }
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    const double per = ns / static_cast<double>(iterations);
    if (r == 0 || per < best) best = per;
  }
  return best;
}

}  // namespace

PYBIND11_MODULE(_spin_probe, m) {
  m.doc() = "The cost of one spin-wait iteration, measured before OpenMP loads (twinfer/_libs.py).";
  m.def("spin_ns", &spin_ns, pybind11::arg("iterations") = 20000, pybind11::arg("repeats") = 3,
        "Nanoseconds per iteration of a load + pause spin loop (least of `repeats`); 0.0 where unknown.");
}
