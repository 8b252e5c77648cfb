// The simulated device's memory map and race detector.
//
// Every block of simulated device (and page-locked host) memory is
// registered with its space. Every access to a block by an *agent* — a
// stream, or the host — is checked, when it is enqueued, against the
// accesses before it: two accesses to overlapping bytes, at least one a
// write, by different agents, must be ordered by the happens-before
// relation that streams, events and host synchronisation establish, or the
// program has a race that a real GPU may or may not show. Vector clocks
// track that relation (as in FastTrack / ThreadSanitizer):
//
//   - each agent a keeps a clock VC_a (one counter per agent); enqueueing work
//     on stream s ticks VC_s[s], and the work inherits what the host knows
//     (work enqueued after a host write sees that write);
//   - recording an event on s copies VC_s into the event; a stream waiting on
//     it, or the host synchronising on it, takes the element-wise maximum;
//   - an access by a with clock VC_a is ordered after an earlier access
//     (agent b, tick t) iff a == b or VC_a[b] >= t.
//
// Because the check runs at enqueue time on the vector clocks, a missing
// event wait or a host read before synchronising is reported every time,
// not only when the timing happens to expose it. The worker threads' random
// delays (sim_stream.h) make the same bugs produce wrong answers too, for
// code paths that bypass the checks.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/device_api.h"

namespace twinfer::sim {

using Clock = std::vector<uint64_t>;  // indexed by agent id; 0 is the host

void clock_join(Clock& into, const Clock& from);  // element-wise max
inline uint64_t clock_at(const Clock& c, size_t agent) { return agent < c.size() ? c[agent] : 0; }

constexpr int kHostAgent = 0;

// Not thread-safe: the simulated device serialises calls with its mutex.
class MemoryOrder {
 public:
  struct Block {
    size_t bytes = 0;
    MemorySpace space = MemorySpace::kDevice;
    bool freed = false;  // a free is enqueued: any later access is a use after free
  };

  void add_block(const void* base, size_t bytes, MemorySpace space);
  void mark_freed(const void* base);
  void remove_block(const void* base);
  // The block holding p (nullptr: ordinary host memory, not tracked).
  const Block* find(const void* p, uintptr_t* base = nullptr) const;
  MemorySpace space_of(const void* p) const;

  // Checks that `acc`, done by `agent` whose clock is `vc` at `tick`
  // (vc[agent] == tick), is ordered after every conflicting earlier access,
  // then records it. Throws Error(kRuntime) naming `what` on a race, a use
  // after free, or a range that leaves its block.
  void access(int agent, const Clock& vc, const Accesses& acc, const std::string& what);

  size_t tracked_accesses() const;  // for tests of the history's pruning

 private:
  struct Access {
    uintptr_t begin, end;
    int agent;
    uint64_t tick;
    bool write;
  };
  struct Entry {
    Block block;
    std::vector<Access> history;
  };
  Entry* entry_for(const MemoryRange& r, const std::string& what, uintptr_t* base);
  void check(const Entry& e, uintptr_t b, uintptr_t end, bool write, int agent, const Clock& vc,
             const std::string& what) const;
  static void record(Entry& e, uintptr_t b, uintptr_t end, bool write, int agent, uint64_t tick);

  std::map<uintptr_t, Entry> blocks_;
};

std::string agent_name(int agent);

}  // namespace twinfer::sim
