#include "runtime/group_graph.h"

#include <algorithm>

#include "core/error.h"
#include "runtime/transfer.h"

namespace twinfer {

namespace {
constexpr size_t kMaxGraphs = 8;  // shapes kept; the least recently used goes
}

struct GroupGraph::Entry {
  GroupKey key;
  std::vector<Tensor> inputs;                  // the graph reads these (not the keyed ones)
  std::vector<std::vector<Tensor>> outputs;    // views of the members' buffers, written by the graph
  std::unique_ptr<GraphExec> exec;
  std::unique_ptr<GroupStaging> staging;
  // The members' plans and device arenas the graph reads and writes: kept
  // while the graph lives, let go with it (RunOptions::graph_holds).
  std::vector<std::shared_ptr<const void>> holds;

  Entry(const std::vector<Tensor>& in, const std::vector<Tensor>& values, const std::vector<char>& keyed)
      : key(in, values, keyed) {}
};

GroupGraph::GroupGraph(std::vector<GroupMember> members, size_t num_inputs)
    : members_(std::move(members)), num_inputs_(num_inputs) {
  device_ = check_group(members_, num_inputs_, keyed_);
  api_ = &device_api(device_);
  stream_ = api_->create_stream(0);
}

GroupGraph::~GroupGraph() {
  try {
    stream_->synchronize();
  } catch (...) {
  }
}

GroupGraph::Stats GroupGraph::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  Stats s = stats_;
  s.graphs = entries_.size();
  return s;
}

std::vector<Tensor> GroupGraph::feeds_for(size_t m, const std::vector<Tensor>& inputs,
                                          const std::vector<std::vector<Tensor>>& outputs) const {
  std::vector<Tensor> feeds;
  for (const auto& [src, k] : members_[m].sources) feeds.push_back(src == -1 ? inputs[k] : outputs[src][k]);
  return feeds;
}

std::vector<std::vector<Tensor>> GroupGraph::run_eagerly(const std::vector<Tensor>& inputs) {
  std::vector<std::vector<Tensor>> outs;
  for (size_t m = 0; m < members_.size(); ++m)
    outs.push_back(members_[m].engine->run(*members_[m].context, feeds_for(m, inputs, outs)));
  return outs;
}

std::unique_ptr<GroupGraph::Entry> GroupGraph::capture(const std::vector<Tensor>& inputs,
                                                       const std::vector<Tensor>& values) {
  auto e = std::make_unique<Entry>(inputs, values, keyed_);
  for (const Tensor& t : inputs) e->inputs.push_back(Tensor::empty(t.dtype(), t.shape(), device_));
  // Nothing may be waited for across the capture's boundary: every member's
  // eager work is finished first.
  for (auto& g : members_) g.context->synchronize();
  stream_->synchronize();

  const std::shared_ptr<void> current = api_->make_current();
  std::vector<std::shared_ptr<Event>> edges;  // alive until the capture ends
  stream_->begin_capture();
  try {
    auto fork = api_->create_event();
    edges.push_back(fork);
    stream_->record(*fork);
    for (size_t m = 0; m < members_.size(); ++m) {
      GroupMember& g = members_[m];
      // The member's capture stream joins the capture, not its own stream:
      // other threads free the context's earlier outputs on that one, and a
      // free enqueued there meanwhile would become part of the graph.
      RunOptions ro;
      ro.stream = g.context->capture_stream();
      ro.graph_holds = &e->holds;
      Stream& s = *ro.stream;
      s.wait(*fork);
      // Keyed inputs as host values: the member's plan for them holds them
      // as constants, so the capture reads nothing of them.
      std::vector<Tensor> graph_inputs = e->inputs;
      for (size_t i = 0; i < graph_inputs.size(); ++i)
        if (keyed_[i]) graph_inputs[i] = e->key.values[i];
      e->outputs.push_back(g.engine->run(*g.context, feeds_for(m, graph_inputs, e->outputs), ro));
      auto join = api_->create_event();
      edges.push_back(join);
      s.record(*join);
      stream_->wait(*join);
    }
    e->exec = stream_->end_capture();
  } catch (const Error& err) {
    stream_->abort_capture();
    throw Error(err.kind(), std::string("this group cannot be captured as one graph: ") + err.what());
  } catch (...) {
    stream_->abort_capture();
    throw;
  }
  std::vector<Tensor> all_outputs;
  for (const auto& outs : e->outputs) all_outputs.insert(all_outputs.end(), outs.begin(), outs.end());
  e->staging = std::make_unique<GroupStaging>(*api_, e->inputs, all_outputs);
  ++stats_.captures;
  return e;
}

std::vector<std::vector<Tensor>> GroupGraph::replay(Entry& e, const std::vector<Tensor>& inputs, bool host_outputs) {
  const std::shared_ptr<void> current = api_->make_current();
  Stream& S = *stream_;
  // The graph writes the members' buffers: after each member's latest run.
  for (auto& g : members_) g.context->order_before(S);
  std::vector<std::shared_ptr<Storage>> device_inputs;
  e.staging->put_inputs(S, inputs, e.inputs, keyed_, device_inputs);
  e.exec->launch(S);
  ++stats_.replays;
  stats_.nodes = e.exec->num_nodes();
  std::vector<std::vector<Tensor>> outs;
  size_t first = 0;
  for (const auto& v : e.outputs) {
    outs.push_back(e.staging->take_outputs(stream_, v, host_outputs, first));
    first += v.size();
  }
  auto done = api_->create_event();
  S.record(*done);
  for (auto& st : device_inputs) st->record_use(done, this);
  for (auto& g : members_) g.context->order_after(S, done);
  e.staging->hold_until(done, std::move(device_inputs));
  if (!host_outputs) {
    for (size_t m = 0; m < outs.size(); ++m)
      for (auto& t : outs[m]) {
        t.set_ready_event(done);
        t.set_error_flag(members_[m].context->error_flag());  // an index out of range surfaces when it is read
      }
    return outs;
  }
  S.synchronize();
  e.staging->release_held();
  for (auto& g : members_) g.context->check_kernel_errors();
  first = 0;
  for (size_t m = 0; m < e.outputs.size(); ++m) {
    outs[m] = e.staging->read_host(e.outputs[m], first);
    first += e.outputs[m].size();
  }
  return outs;
}

std::vector<std::vector<Tensor>> GroupGraph::run(const std::vector<Tensor>& inputs, bool host_outputs) {
  if (inputs.size() != num_inputs_)
    throw Error(ErrorKind::kInvalidArgument, "the group takes " + std::to_string(num_inputs_) + " inputs, got " +
                                                 std::to_string(inputs.size()));
  for (const Tensor& t : inputs)
    if (!t.device().is_cpu() && t.device() != device_)
      throw Error(ErrorKind::kInvalidArgument, "a group input on " + t.device().str() + "; the group runs on " +
                                                   device_.str() + " (or takes host arrays)");
  std::lock_guard<std::mutex> lock(mutex_);
  // Each member's context for the whole call: an eager run of a member on
  // another thread landed between a replay's order_before and order_after,
  // waited for nothing, and wrote the arena the graph was writing.
  std::vector<std::unique_lock<std::recursive_mutex>> held;
  held.reserve(members_.size());
  for (auto& g : members_) held.push_back(g.context->hold());
  const std::vector<Tensor> values = keyed_host_values(keyed_, inputs);
  Entry* hit = nullptr;
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if ((*it)->key.matches(inputs, values, keyed_)) {
      hit = it->get();
      std::rotate(it, it + 1, entries_.end());  // the most recently used last: eviction takes the front
      break;
    }
  if (hit) return replay(*hit, inputs, host_outputs);

  // First call at these shapes: run eagerly (the answer for this call), then capture.
  std::vector<std::vector<Tensor>> outs = run_eagerly(inputs);
  if (host_outputs)
    for (auto& o : outs)
      for (auto& t : o) t = to_host(t);
  auto e = capture(inputs, values);
  if (entries_.size() >= kMaxGraphs) {
    stream_->synchronize();
    entries_.erase(entries_.begin());
  }
  entries_.push_back(std::move(e));
  return outs;
}

}  // namespace twinfer
