// What the two captured forms of a group share (runtime/group_graph.h: one
// call's members in one graph; runtime/pipelined_graph.h: a Pipeline's items
// overlapped across launches): the members and their checks, the inputs
// whose values key the graphs, and page-locked staging for host inputs and
// outputs.
#pragma once
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "core/device_api.h"
#include "core/tensor.h"
#include "runtime/engine.h"
#include "runtime/execution_context.h"

namespace twinfer {

struct GroupMember {
  std::shared_ptr<const Engine> engine;
  std::shared_ptr<ExecutionContext> context;  // the member's own; used by nothing else meanwhile
  // Per engine input: {-1, k} the group's input k; {m, k} output k of member m < this one.
  std::vector<std::pair<int, int>> sources;
};

// Checks that the members run on one accelerator (returned) and that every
// source names a group input or an earlier member's output. `keyed` gets,
// per group input, whether a member's plan is keyed by its value (a shape
// or steering input); such an input fed by a member's output is refused,
// since a graph cannot read it before it is captured.
Device check_group(const std::vector<GroupMember>& members, size_t num_inputs, std::vector<char>& keyed);

// Per group input: its host value where `keyed` says the graphs are keyed by
// it (read back from the device if need be), else an empty tensor.
std::vector<Tensor> keyed_host_values(const std::vector<char>& keyed, const std::vector<Tensor>& inputs);

// The inputs' shapes and dtypes, and the keyed values, a graph was captured for.
struct GroupKey {
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  std::vector<Tensor> values;  // per group input: the host value it is keyed by, or none

  // `values` are cloned: the caller's arrays may change.
  GroupKey(const std::vector<Tensor>& inputs, const std::vector<Tensor>& values, const std::vector<char>& keyed);
  bool matches(const std::vector<Tensor>& inputs, const std::vector<Tensor>& values,
               const std::vector<char>& keyed) const;
};

// A graph's ways in and out of the device: a host input is copied into
// page-locked staging and from there into the graph's input buffer; an
// output is copied out of the members' buffers (the next launch overwrites
// them) into a new device tensor, or through staging to the host.
class GroupStaging {
 public:
  GroupStaging(DeviceApi& api, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs);

  // Enqueues on `s` the copies of `inputs` into `dst` (none for a keyed
  // input: the graph's plans hold its value). A device input's storage goes
  // into `device_inputs`, for hold_until.
  void put_inputs(Stream& s, const std::vector<Tensor>& inputs, const std::vector<Tensor>& dst,
                  const std::vector<char>& keyed, std::vector<std::shared_ptr<Storage>>& device_inputs);
  // Enqueues on `s` the copies of `values` (outputs first..first+n of the
  // graph) out: returns new device tensors, or nothing for the host (then
  // read_host after `s` is synchronised).
  std::vector<Tensor> take_outputs(const std::shared_ptr<Stream>& s, const std::vector<Tensor>& values, bool host,
                                   size_t first);
  std::vector<Tensor> read_host(const std::vector<Tensor>& values, size_t first);
  // Keeps `storages` until `done` is reached: a framework's array imported
  // without a copy goes back to its allocator when we let go, which may hand
  // it out again before our copy out of it has run. Those reached are let go
  // at each call, and all of them by release_held once the stream is waited for.
  void hold_until(std::shared_ptr<Event> done, std::vector<std::shared_ptr<Storage>> storages);
  void release_held() { held_.clear(); }

 private:
  DeviceApi* api_;
  Device device_;
  std::shared_ptr<Storage> staging_;
  std::vector<size_t> in_offsets_, out_offsets_;
  std::shared_ptr<Event> staged_;  // the last launch's staging copies of inputs
  bool staging_pending_ = false;
  std::deque<std::pair<std::shared_ptr<Event>, std::vector<std::shared_ptr<Storage>>>> held_;
};

}  // namespace twinfer
