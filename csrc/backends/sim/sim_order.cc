#include "backends/sim/sim_order.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace twinfer::sim {

void clock_join(Clock& into, const Clock& from) {
  if (into.size() < from.size()) into.resize(from.size(), 0);
  for (size_t i = 0; i < from.size(); ++i) into[i] = std::max(into[i], from[i]);
}

std::string agent_name(int agent) {
  return agent == kHostAgent ? std::string("the host") : "stream " + std::to_string(agent);
}

namespace {
std::string range_str(uintptr_t b, uintptr_t e, MemorySpace space) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%s memory [0x%llx, +%llu bytes)", memory_space_name(space),
                static_cast<unsigned long long>(b), static_cast<unsigned long long>(e - b));
  return buf;
}
}  // namespace

void MemoryOrder::add_block(const void* base, size_t bytes, MemorySpace space) {
  Entry e;
  e.block.bytes = bytes;
  e.block.space = space;
  blocks_[reinterpret_cast<uintptr_t>(base)] = std::move(e);
}

void MemoryOrder::mark_freed(const void* base) {
  auto it = blocks_.find(reinterpret_cast<uintptr_t>(base));
  if (it != blocks_.end()) it->second.block.freed = true;
}

void MemoryOrder::remove_block(const void* base) { blocks_.erase(reinterpret_cast<uintptr_t>(base)); }

const MemoryOrder::Block* MemoryOrder::find(const void* p, uintptr_t* base) const {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = blocks_.upper_bound(a);
  if (it == blocks_.begin()) return nullptr;
  --it;
  // One past the end still belongs to the block (an empty range at its end).
  if (a > it->first + it->second.block.bytes) return nullptr;
  if (base) *base = it->first;
  return &it->second.block;
}

MemorySpace MemoryOrder::space_of(const void* p) const {
  const Block* b = find(p);
  return b ? b->space : MemorySpace::kHost;
}

MemoryOrder::Entry* MemoryOrder::entry_for(const MemoryRange& r, const std::string& what, uintptr_t* base) {
  if (!find(r.ptr, base)) return nullptr;
  Entry& e = blocks_.at(*base);
  const uintptr_t b = reinterpret_cast<uintptr_t>(r.ptr);
  if (b + r.bytes > *base + e.block.bytes)
    throw Error(ErrorKind::kRuntime, "simulated device: " + what + " runs past the end of its " +
                                         memory_space_name(e.block.space) + " block (" +
                                         std::to_string(b + r.bytes - *base) + " of " +
                                         std::to_string(e.block.bytes) + " bytes)");
  if (e.block.freed)
    throw Error(ErrorKind::kRuntime, "simulated device: " + what + " uses " +
                                         range_str(b, b + r.bytes, e.block.space) + " after it was freed");
  return &e;
}

void MemoryOrder::check(const Entry& e, uintptr_t b, uintptr_t end, bool write, int agent, const Clock& vc,
                        const std::string& what) const {
  for (const Access& x : e.history) {
    if (x.end <= b || end <= x.begin) continue;  // no overlap
    if (!write && !x.write) continue;            // two reads never conflict
    if (x.agent == agent || clock_at(vc, x.agent) >= x.tick) continue;
    const std::string how = agent == kHostAgent ? "without synchronising with " + agent_name(x.agent)
                            : x.agent == kHostAgent
                                ? "while the host's access is not ordered before it"
                                : "without an event wait on " + agent_name(x.agent);
    throw Error(ErrorKind::kRuntime,
                "simulated device: race: " + what + " (" + agent_name(agent) + ") " + (write ? "writes" : "reads") +
                    " " + range_str(std::max(b, x.begin), std::min(end, x.end), e.block.space) + " that " +
                    agent_name(x.agent) + " " + (x.write ? "writes" : "reads") + ", " + how);
  }
}

void MemoryOrder::record(Entry& e, uintptr_t b, uintptr_t end, bool write, int agent, uint64_t tick) {
  // The access was checked to be ordered after every conflicting one, so a
  // write makes the earlier accesses it covers redundant (whoever is ordered
  // after it is ordered after them), as does a later read by the same agent.
  auto& h = e.history;
  h.erase(std::remove_if(h.begin(), h.end(),
                         [&](const Access& x) {
                           const bool covered = b <= x.begin && x.end <= end;
                           return covered && (write || (!x.write && x.agent == agent));
                         }),
          h.end());
  h.push_back(Access{b, end, agent, tick, write});
}

void MemoryOrder::access(int agent, const Clock& vc, const Accesses& acc, const std::string& what) {
  const uint64_t tick = clock_at(vc, agent);
  uintptr_t base = 0;
  // Check everything first, so a failed task records nothing.
  for (int pass = 0; pass < 2; ++pass) {
    for (int w = 0; w < 2; ++w) {
      for (const MemoryRange& r : w ? acc.writes : acc.reads) {
        if (!r.ptr || !r.bytes) continue;
        Entry* e = entry_for(r, what, &base);
        if (!e) continue;
        const uintptr_t b = reinterpret_cast<uintptr_t>(r.ptr);
        if (pass == 0) check(*e, b, b + r.bytes, w == 1, agent, vc, what);
        else record(*e, b, b + r.bytes, w == 1, agent, tick);
      }
    }
  }
}

size_t MemoryOrder::tracked_accesses() const {
  size_t n = 0;
  for (const auto& kv : blocks_) n += kv.second.history.size();
  return n;
}

}  // namespace twinfer::sim
