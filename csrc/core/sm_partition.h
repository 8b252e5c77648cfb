// Shares of a device's SMs, handed out as partitions for green contexts.
//
// CUDA partitions SMs in groups of a fixed granularity (8 on an H100), and
// partitions combined into one green context must come from one split. So
// the device's SMs are split once, into `groups` groups, and each share gets
// whole groups, disjoint from every partition still alive: shares of live
// contexts that add up to more than the device are refused, not overlapped.
// The bookkeeping is host code shared by the CUDA backend and the simulated
// device (which splits an H100-like 132 SMs the same way).
#pragma once
#include <mutex>
#include <string>
#include <vector>

namespace twinfer {

class SmPartitioner {
 public:
  // `group_sms[i]`: SMs in group i (the driver's split, in its order).
  SmPartitioner(std::string device, int total_sms, std::vector<int> group_sms);

  struct Grant {
    std::vector<int> groups;  // indices into the split
    int sms = 0;
  };
  // Groups for `share` of the device: floor(share x groups), at least one,
  // so shares adding up to at most 1 always fit together (rounding to the
  // nearest gave 0.5 + 0.5 eight groups each of an H100's fifteen).
  // Throws kInvalidArgument for a share outside (0, 1] and kDevice when
  // fewer groups are free than the share needs.
  Grant acquire(double share);
  void release(const std::vector<int>& groups);

  int groups_for(double share) const;
  int total_sms() const { return total_sms_; }
  int group_count() const { return static_cast<int>(group_sms_.size()); }
  int free_groups() const;

 private:
  const std::string device_;
  const int total_sms_;
  const std::vector<int> group_sms_;
  mutable std::mutex m_;
  std::vector<bool> taken_;
};

}  // namespace twinfer
