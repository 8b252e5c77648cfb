#include "runtime/group_graph.h"

#include <cstring>

#include "core/error.h"
#include "runtime/transfer.h"
#include "runtime/value_key.h"

namespace twinfer {

namespace {
constexpr size_t kMaxGraphs = 8;  // shapes kept; the oldest goes
}

struct GroupGraph::Entry {
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  std::vector<Tensor> values;                  // per group input: the host value it is keyed by, or none
  std::vector<Tensor> inputs;                  // the graph reads these (not the keyed ones)
  std::vector<std::vector<Tensor>> outputs;    // views of the members' buffers, written by the graph
  std::unique_ptr<GraphExec> exec;
  std::shared_ptr<Storage> staging;            // page-locked: host inputs in, host outputs out
  std::vector<size_t> in_offsets, out_offsets;
  std::shared_ptr<Event> staged;               // the last launch's staging copies
  bool staging_pending = false;
  // The members' plans and device arenas the graph reads and writes: kept
  // while the graph lives, let go with it (RunOptions::graph_holds).
  std::vector<std::shared_ptr<const void>> holds;
};

GroupGraph::GroupGraph(std::vector<GroupMember> members, size_t num_inputs)
    : members_(std::move(members)), num_inputs_(num_inputs) {
  if (members_.empty()) throw Error(ErrorKind::kInvalidArgument, "a group graph needs at least one member");
  device_ = members_[0].engine->device();
  if (!device_.is_accelerator())
    throw Error(ErrorKind::kInvalidArgument,
                "a group is captured as one graph on a GPU; its members run on " + device_.str());
  for (size_t m = 0; m < members_.size(); ++m) {
    const GroupMember& g = members_[m];
    if (g.engine->device() != device_ || !g.context || g.context->device() != device_)
      throw Error(ErrorKind::kInvalidArgument, "member " + std::to_string(m) + " runs on " +
                                                   g.engine->device().str() + ", the group on " + device_.str() +
                                                   ": one graph holds one device's work");
    if (g.sources.size() != g.engine->inputs().size())
      throw Error(ErrorKind::kInvalidArgument, "member " + std::to_string(m) + ": " +
                                                   std::to_string(g.sources.size()) + " sources for " +
                                                   std::to_string(g.engine->inputs().size()) + " inputs");
    for (const auto& [src, k] : g.sources) {
      const bool ok = src == -1 ? (k >= 0 && static_cast<size_t>(k) < num_inputs_)
                                : (src >= 0 && static_cast<size_t>(src) < m && k >= 0 &&
                                   static_cast<size_t>(k) < members_[src].engine->outputs().size());
      if (!ok)
        throw Error(ErrorKind::kInvalidArgument, "member " + std::to_string(m) + ": an input source (" +
                                                     std::to_string(src) + ", " + std::to_string(k) +
                                                     ") names no group input or earlier member's output");
    }
  }
  keyed_.assign(num_inputs_, 0);
  for (size_t m = 0; m < members_.size(); ++m) {
    const Engine& eng = *members_[m].engine;
    for (int i : eng.value_keyed_inputs()) {
      const auto [src, k] = members_[m].sources[i];
      if (src == -1) {
        keyed_[k] = 1;
        continue;
      }
      throw Error(ErrorKind::kInvalidArgument,
                  "member " + std::to_string(m) + "'s input '" + eng.inputs()[i].name +
                      "' picks its plan by value (a shape or steering input) and comes from member " +
                      std::to_string(src) + "'s output, which a graph cannot read before it is captured: "
                      "feed it from the group's inputs, or run the group without one graph");
    }
  }
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

std::vector<Tensor> GroupGraph::keyed_values(const std::vector<Tensor>& inputs) const {
  std::vector<Tensor> values(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    if (keyed_[i]) values[i] = inputs[i].device().is_cpu() ? inputs[i] : to_host(inputs[i]);
  return values;
}

std::unique_ptr<GroupGraph::Entry> GroupGraph::capture(const std::vector<Tensor>& inputs,
                                                       const std::vector<Tensor>& values) {
  auto e = std::make_unique<Entry>();
  for (size_t i = 0; i < values.size(); ++i)
    if (keyed_[i]) e->values.push_back(values[i].clone());  // the caller's array may change
    else e->values.emplace_back();
  size_t staging_bytes = 0;
  for (const Tensor& t : inputs) {
    e->shapes.push_back(t.shape());
    e->dtypes.push_back(t.dtype());
    e->inputs.push_back(Tensor::empty(t.dtype(), t.shape(), device_));
    e->in_offsets.push_back(staging_bytes);
    staging_bytes += (t.bytes() + 255) / 256 * 256;
  }
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
        if (keyed_[i]) graph_inputs[i] = e->values[i];
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
  for (const auto& outs : e->outputs)
    for (const Tensor& t : outs) {
      e->out_offsets.push_back(staging_bytes);
      staging_bytes += (t.bytes() + 255) / 256 * 256;
    }
  e->staging = Storage::allocate(api_->pinned_allocator(), std::max<size_t>(staging_bytes, 256));
  e->staged = api_->create_event();
  ++stats_.captures;
  return e;
}

std::vector<std::vector<Tensor>> GroupGraph::replay(Entry& e, const std::vector<Tensor>& inputs, bool host_outputs) {
  const std::shared_ptr<void> current = api_->make_current();
  Stream& S = *stream_;
  char* staging = static_cast<char*>(e.staging->data());
  // The graph writes the members' buffers: after each member's latest run.
  for (auto& g : members_) g.context->order_before(S);
  // Inputs into the graph's input buffers.
  std::vector<std::shared_ptr<Storage>> device_inputs;
  bool staged = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (keyed_[i]) continue;  // the graph's plans hold its value
    if (t.device() == device_) {
      if (t.ready_event()) wait_across_capture(S, *t.ready_event());
      S.copy(e.inputs[i].data(), t.data(), t.bytes());
      if (t.storage()) device_inputs.push_back(t.storage());
    } else {
      if (e.staging_pending && !staged) host_wait(*e.staged);
      e.staging_pending = false;
      staged = true;
      char* st = staging + e.in_offsets[i];
      api_->host_access({st, t.bytes()}, true, "staging a group input");
      if (t.bytes()) std::memcpy(st, t.data(), t.bytes());
      S.copy(e.inputs[i].data(), st, t.bytes());
    }
  }
  if (staged) {
    S.record(*e.staged);
    e.staging_pending = true;
  }
  e.exec->launch(S);
  ++stats_.replays;
  stats_.nodes = e.exec->num_nodes();
  // Outputs out of the members' buffers (the next launch overwrites those).
  std::vector<std::vector<Tensor>> outs(e.outputs.size());
  size_t k = 0;
  for (size_t m = 0; m < e.outputs.size(); ++m)
    for (const Tensor& v : e.outputs[m]) {
      if (host_outputs) {
        S.copy(staging + e.out_offsets[k], v.data(), v.bytes());
      } else {
        Tensor t = Tensor::empty_on(v.dtype(), v.shape(), device_, stream_);
        S.copy(t.data(), v.data(), v.bytes());
        outs[m].push_back(std::move(t));
      }
      ++k;
    }
  auto done = api_->create_event();
  S.record(*done);
  for (auto& st : device_inputs) st->record_use(done, this);
  for (auto& g : members_) g.context->order_after(S, done);
  if (!host_outputs) {
    for (auto& o : outs)
      for (auto& t : o) t.set_ready_event(done);
    return outs;
  }
  S.synchronize();
  for (auto& g : members_) g.context->check_kernel_errors();
  k = 0;
  for (size_t m = 0; m < e.outputs.size(); ++m)
    for (const Tensor& v : e.outputs[m]) {
      Tensor h = Tensor::empty(v.dtype(), v.shape(), Device::cpu());
      char* st = staging + e.out_offsets[k++];
      api_->host_access({st, h.bytes()}, false, "reading a group output");
      if (h.bytes()) std::memcpy(h.data(), st, h.bytes());
      outs[m].push_back(std::move(h));
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
  const std::vector<Tensor> values = keyed_values(inputs);
  Entry* hit = nullptr;
  for (auto& e : entries_) {
    bool same = true;
    for (size_t i = 0; i < inputs.size() && same; ++i)
      same = e->shapes[i] == inputs[i].shape() && e->dtypes[i] == inputs[i].dtype() &&
             (!keyed_[i] || same_value(e->values[i], values[i]));
    if (same) hit = e.get();
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
