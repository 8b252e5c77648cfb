// Several engines' runs captured as one graph: a Parallel's members side by
// side or a Pipeline's stages in a chain, each on its own context's stream
// inside one capture (forked from the group's stream and joined back into
// it), replayed with one launch per call.
//
// A graph is captured per set of input shapes. The first call at a shape
// runs the members eagerly (their buffers and the libraries get set up, and
// its results are returned), then captures; later calls copy the inputs into
// the graph's own input buffers, launch, and copy the outputs out.
//
// A group input that a member's plan is keyed by (a shape or steering
// input: its value, not only its shape, picks the plan) keys the graphs too:
// one per value, captured with that plan, the value read on the host (the
// plan holds it as a constant; the graph never reads it). Such an input fed
// by another member's output could not be read before the capture: refused
// when the group is made.
#pragma once
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "core/device_api.h"
#include "core/tensor.h"
#include "runtime/group_io.h"

namespace twinfer {

class GroupGraph {
 public:
  GroupGraph(std::vector<GroupMember> members, size_t num_inputs);
  ~GroupGraph();

  // Every member's outputs: device tensors (ready when their event is), or
  // host tensors once the run is waited for.
  std::vector<std::vector<Tensor>> run(const std::vector<Tensor>& inputs, bool host_outputs);

  struct Stats {
    size_t captures = 0, replays = 0, graphs = 0, nodes = 0;  // nodes: of the graph used last
  };
  Stats stats() const;
  Device device() const { return device_; }
  const std::shared_ptr<Stream>& stream() const { return stream_; }

 private:
  struct Entry;
  std::vector<std::vector<Tensor>> run_eagerly(const std::vector<Tensor>& inputs);
  std::unique_ptr<Entry> capture(const std::vector<Tensor>& inputs, const std::vector<Tensor>& values);
  std::vector<std::vector<Tensor>> replay(Entry& e, const std::vector<Tensor>& inputs, bool host_outputs);
  std::vector<Tensor> feeds_for(size_t m, const std::vector<Tensor>& inputs,
                                const std::vector<std::vector<Tensor>>& outputs) const;

  Device device_;
  DeviceApi* api_ = nullptr;
  std::vector<GroupMember> members_;
  size_t num_inputs_;
  std::vector<char> keyed_;  // per group input: a member's plan is keyed by its value
  std::shared_ptr<Stream> stream_;  // the capture's origin; graphs launch here
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Entry>> entries_;
  Stats stats_;
};

}  // namespace twinfer
