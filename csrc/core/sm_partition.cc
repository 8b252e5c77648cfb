#include "core/sm_partition.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/error.h"

namespace twinfer {

SmPartitioner::SmPartitioner(std::string device, int total_sms, std::vector<int> group_sms)
    : device_(std::move(device)), total_sms_(total_sms), group_sms_(std::move(group_sms)), taken_(group_sms_.size()) {}

int SmPartitioner::groups_for(double share) const {
  if (!(share > 0.0 && share <= 1.0))
    throw Error(ErrorKind::kInvalidArgument, "sm_share must be in (0, 1], got " + std::to_string(share));
  const int n = group_count();
  // The epsilon keeps a share that is a whole number of groups (0.3 of 10)
  // from losing one to float rounding.
  return std::clamp(static_cast<int>(std::floor(share * n + 1e-9)), 1, n);
}

int SmPartitioner::free_groups() const {
  std::lock_guard<std::mutex> lock(m_);
  return static_cast<int>(std::count(taken_.begin(), taken_.end(), false));
}

SmPartitioner::Grant SmPartitioner::acquire(double share) {
  const int want = groups_for(share);
  std::lock_guard<std::mutex> lock(m_);
  Grant g;
  for (int i = 0; i < group_count() && static_cast<int>(g.groups.size()) < want; ++i)
    if (!taken_[i]) g.groups.push_back(i);
  if (static_cast<int>(g.groups.size()) < want) {
    std::ostringstream msg;
    msg << "sm_share " << share << " asks for " << want << " of " << device_ << "'s " << group_count()
        << " SM groups (" << (group_sms_.empty() ? 0 : group_sms_[0]) << " SMs each), but only " << g.groups.size()
        << " are free: the shares of the contexts alive add up to more than the device (partitions never "
           "overlap); lower sm_share or close contexts first";
    throw Error(ErrorKind::kDevice, msg.str());
  }
  for (int i : g.groups) {
    taken_[i] = true;
    g.sms += group_sms_[i];
  }
  return g;
}

void SmPartitioner::release(const std::vector<int>& groups) {
  std::lock_guard<std::mutex> lock(m_);
  for (int i : groups)
    if (i >= 0 && i < group_count()) taken_[i] = false;
}

}  // namespace twinfer
