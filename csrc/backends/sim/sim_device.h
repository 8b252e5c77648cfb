// The simulated device ("sim:0"): a GPU stand-in on the CPU that tests the
// GPU runtime — placement, copies, stream order, events, graph capture and
// replay, staging — on machines without a GPU (CI, development machines).
//
//   - Memory: "device" and page-locked blocks live in their own registered
//     spaces; fresh blocks are filled with 0xFF bytes (NaN as float) and freed
//     blocks poisoned, so reading what nobody wrote shows up as NaN.
//   - Streams: one worker thread each, running its queue in order, late (a
//     random delay before each task) and in no fixed order across streams.
//   - Events: order one stream after another, or the host after a stream.
//   - Capture: a stream's work is recorded, not run; replay enqueues it again.
//   - Kernels: the CPU kernels, run by the stream's worker as host tasks.
//   - Checks (sim_order.h): every task's memory accesses are checked against
//     the order streams, events and host synchronisation establish; the host
//     touching device memory, a use after free, work during capture that CUDA
//     forbids (synchronising, allocating on the capturing thread, pageable
//     copies) are errors.
//
// It is a testing device: `twinfer.load(model, device="sim")`; its knobs are
// in twinfer.testing.
#pragma once
#include <cstdint>

namespace twinfer::sim {

struct SimConfig {
  int max_delay_us = 50;   // each task waits a random 0..max before it runs
  uint64_t seed = 0;       // 0: a fresh seed per stream
  bool check_order = true; // the race detector (sim_order.h)
  uint64_t memory_limit = 0;  // device bytes; 0: unlimited (tests of running out of memory)
  int compute_capability = 90;  // major*10+minor the device reports (tests of precisions older GPUs lack)
};

SimConfig sim_config();
void set_sim_config(const SimConfig& c);

}  // namespace twinfer::sim
