// A Pipeline's stages captured so that one launch runs every stage on a
// different item: stage s on item j - s in launch j, each stage on its own
// context's stream, side by side (GraphedPipeline.map). One graph per item
// (runtime/group_graph.h) runs the stages one after another and can only
// overlap them with nothing; this one overlaps stage A of item k + 1 with
// stage B of item k inside a single launch.
//
// Values that cross from one launch to the next wait in delay lines: a
// stage-m output read by stage s sits s - m launches (an item input read by
// stage s, s launches) in buffers of the graph's own, shifted by device
// copies at the end of each launch. Launches are ordered on the group's
// stream, so nothing else is shared between them.
//
// The first item at a new set of shapes (and keyed values) runs eagerly, as
// GroupGraph's first call does (plans built, libraries set up); later items
// with that key go through the graphs. A launch runs the stages that have an
// item: [0, j] while the pipeline fills, all of them, then [j - n + 1, S - 1]
// while it drains; each such range is captured once per key when first
// needed. An item with another key drains the items in flight first, so
// results always come in the items' order.
#pragma once
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "runtime/group_io.h"

namespace twinfer {

class PipelinedGraph {
 public:
  PipelinedGraph(std::vector<GroupMember> stages, size_t num_inputs);
  ~PipelinedGraph();

  // One item in. Returns the last stage's outputs of every item finished
  // meanwhile, oldest first: none while the pipeline fills, one in the
  // steady state, more when this item's key drains the others first. Each
  // item's outputs are host tensors (waited for) if it was pushed with
  // host_outputs, else device tensors ready when their event is.
  std::vector<std::vector<Tensor>> push(const std::vector<Tensor>& inputs, bool host_outputs);
  // Runs the launches that finish every item in flight; their outputs.
  std::vector<std::vector<Tensor>> drain();
  // After push or drain raised: the outputs of the items that finished
  // before the error, oldest first (the items in flight are lost).
  std::vector<std::vector<Tensor>> take_finished();
  // Forgets the items in flight (a caller that stopped reading), after
  // waiting for the launched work.
  void reset();

  struct Stats {
    size_t captures = 0, launches = 0, eager = 0, graphs = 0, in_flight = 0;
    size_t nodes = 0;  // of the graph launched last
  };
  Stats stats() const;
  Device device() const { return device_; }
  const std::shared_ptr<Stream>& stream() const { return stream_; }

 private:
  struct Range;
  struct Entry;
  Entry& make_entry(const std::vector<Tensor>& inputs, const std::vector<Tensor>& values,
                    const std::vector<std::vector<Tensor>>& stage_outputs);
  std::unique_ptr<Range> capture(Entry& e, int lo, int hi);
  void launch(const std::vector<Tensor>* inputs, bool host_outputs, std::vector<std::vector<Tensor>>& finished);
  void drain_locked(std::vector<std::vector<Tensor>>& finished);
  void abandon(std::vector<std::vector<Tensor>>& finished);
  std::vector<std::vector<Tensor>> take_pending();
  std::vector<Tensor> feeds_for(size_t s, const std::vector<Tensor>& inputs,
                                const std::vector<std::vector<Tensor>>& outputs) const;

  Device device_;
  DeviceApi* api_ = nullptr;
  std::vector<GroupMember> stages_;
  size_t num_inputs_;
  std::vector<char> keyed_;
  std::shared_ptr<Stream> stream_;  // captures start here; launches and delay-line copies run here
  mutable std::mutex mutex_;
  std::deque<std::unique_ptr<Entry>> entries_;
  // The items in flight: all of one entry's key, launched `launched_` times.
  Entry* current_ = nullptr;
  size_t launched_ = 0;
  std::deque<bool> host_outputs_;  // per item in flight, oldest first
  size_t pushed_ = 0;              // items of current_ launched so far
  std::vector<std::vector<Tensor>> pending_;  // finished before an error, for take_finished
  struct Refusal {
    GroupKey key;
    ErrorKind kind;
    std::string what;
  };
  std::deque<Refusal> refused_;  // keys whose capture failed, with why (the latest kMaxKeys)
  Stats stats_;
};

}  // namespace twinfer
