#include "runtime/pipelined_graph.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "runtime/transfer.h"

namespace twinfer {

namespace {
constexpr size_t kMaxKeys = 8;  // sets of shapes (and keyed values) kept; the least recently used goes
}

// The graph of the launches that run stages [lo, hi].
struct PipelinedGraph::Range {
  std::unique_ptr<GraphExec> exec;
  std::vector<Tensor> last_outputs;  // views of the last stage's buffers, when hi is the last stage
  // The stages' plans and device arenas the graph uses (RunOptions::graph_holds).
  std::vector<std::shared_ptr<const void>> holds;
};

struct PipelinedGraph::Entry {
  GroupKey key;
  std::vector<Tensor> inputs;  // the newest item's inputs, copied in before its first launch
  // input_delay[i][d]: group input i of the item d launches older than the
  // newest ([0] is inputs[i]); as long as the latest stage that reads it.
  std::vector<std::vector<Tensor>> input_delay;
  // output_delay[m][k][d], d >= 1: stage m's output k of the item that
  // stage m ran d launches ago ([0] unused: the stage's buffers themselves).
  std::vector<std::vector<std::vector<Tensor>>> output_delay;
  std::map<std::pair<int, int>, std::unique_ptr<Range>> ranges;
  std::unique_ptr<GroupStaging> staging;

  Entry(const std::vector<Tensor>& in, const std::vector<Tensor>& values, const std::vector<char>& keyed)
      : key(in, values, keyed) {}
};

PipelinedGraph::PipelinedGraph(std::vector<GroupMember> stages, size_t num_inputs)
    : stages_(std::move(stages)), num_inputs_(num_inputs) {
  device_ = check_group(stages_, num_inputs_, keyed_);
  api_ = &device_api(device_);
  stream_ = api_->create_stream(0);
}

PipelinedGraph::~PipelinedGraph() {
  try {
    stream_->synchronize();
  } catch (...) {
  }
}

PipelinedGraph::Stats PipelinedGraph::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  Stats s = stats_;
  s.graphs = 0;
  for (const auto& e : entries_) s.graphs += e->ranges.size();
  s.in_flight = host_outputs_.size();
  return s;
}

std::vector<Tensor> PipelinedGraph::feeds_for(size_t s, const std::vector<Tensor>& inputs,
                                              const std::vector<std::vector<Tensor>>& outputs) const {
  std::vector<Tensor> feeds;
  for (const auto& [src, k] : stages_[s].sources) feeds.push_back(src == -1 ? inputs[k] : outputs[src][k]);
  return feeds;
}

PipelinedGraph::Entry& PipelinedGraph::make_entry(const std::vector<Tensor>& inputs, const std::vector<Tensor>& values,
                                                  const std::vector<std::vector<Tensor>>& stage_outputs) {
  auto e = std::make_unique<Entry>(inputs, values, keyed_);
  // How long each value waits: the latest stage that reads it, counted from
  // the stage that makes it (an item's inputs come with stage 0's launch).
  std::vector<size_t> input_wait(num_inputs_, 0);
  std::vector<std::vector<size_t>> output_wait(stages_.size());
  for (size_t m = 0; m < stages_.size(); ++m) output_wait[m].assign(stage_outputs[m].size(), 0);
  for (size_t s = 0; s < stages_.size(); ++s)
    for (const auto& [src, k] : stages_[s].sources) {
      if (src == -1) {
        if (!keyed_[k]) input_wait[k] = std::max(input_wait[k], s);
      } else {
        output_wait[src][k] = std::max(output_wait[src][k], s - src);
      }
    }
  for (size_t i = 0; i < num_inputs_; ++i) {
    const Tensor& t = inputs[i];
    e->inputs.push_back(Tensor::empty(t.dtype(), t.shape(), device_));
    e->input_delay.push_back({e->inputs.back()});
    for (size_t d = 1; d <= input_wait[i]; ++d)
      e->input_delay.back().push_back(Tensor::empty(t.dtype(), t.shape(), device_));
  }
  e->output_delay.resize(stages_.size());
  for (size_t m = 0; m < stages_.size(); ++m)
    for (size_t k = 0; k < stage_outputs[m].size(); ++k) {
      const Tensor& t = stage_outputs[m][k];
      std::vector<Tensor> line(1);
      for (size_t d = 1; d <= output_wait[m][k]; ++d) line.push_back(Tensor::empty(t.dtype(), t.shape(), device_));
      e->output_delay[m].push_back(std::move(line));
    }
  e->staging = std::make_unique<GroupStaging>(*api_, e->inputs, stage_outputs.back());
  // Every range is captured now, while the stages' contexts are set up for
  // these shapes (the eager run just made them so; a later run at other
  // shapes may set them up for those, and a capture cannot set up buffers).
  // Nothing may be waited for across a capture's boundary: the stages' work
  // is finished first.
  for (auto& g : stages_) g.context->synchronize();
  stream_->synchronize();
  const int S = static_cast<int>(stages_.size());
  for (int lo = 0; lo < S; ++lo)
    for (int hi = lo; hi < S; ++hi) e->ranges[{lo, hi}] = capture(*e, lo, hi);
  if (entries_.size() >= kMaxKeys) {
    stream_->synchronize();
    entries_.pop_front();
  }
  entries_.push_back(std::move(e));
  return *entries_.back();
}

std::unique_ptr<PipelinedGraph::Range> PipelinedGraph::capture(Entry& e, int lo, int hi) {
  auto r = std::make_unique<Range>();
  const size_t last = stages_.size() - 1;
  const std::shared_ptr<void> current = api_->make_current();
  std::vector<std::shared_ptr<Event>> edges;  // alive until the capture ends
  Stream& S = *stream_;
  S.begin_capture();
  try {
    auto fork = api_->create_event();
    edges.push_back(fork);
    S.record(*fork);
    // Each stage reads only what earlier launches left in the delay lines
    // (and the newest item's inputs): the stages run side by side.
    std::vector<std::vector<Tensor>> outs(stages_.size());
    for (int s = lo; s <= hi; ++s) {
      GroupMember& g = stages_[s];
      RunOptions ro;
      ro.stream = g.context->capture_stream();  // as GroupGraph's capture: never the context's own stream
      ro.graph_holds = &r->holds;
      Stream& cs = *ro.stream;
      cs.wait(*fork);
      std::vector<Tensor> feeds;
      for (const auto& [src, k] : g.sources) {
        if (src == -1) feeds.push_back(keyed_[k] ? e.key.values[k] : e.input_delay[k][s]);
        else feeds.push_back(e.output_delay[src][k][s - src]);
      }
      outs[s] = g.engine->run(*g.context, feeds, ro);
      auto join = api_->create_event();
      edges.push_back(join);
      cs.record(*join);
      S.wait(*join);
    }
    // Every line moves one place, the oldest end first so that each buffer
    // is read before it is overwritten; its first place takes this
    // launch's value where the stage that makes it ran.
    auto copy = [&](const Tensor& dst, const Tensor& src) {
      if (dst.bytes()) S.copy(dst.data(), src.data(), dst.bytes());
    };
    auto shift = [&](std::vector<Tensor>& line, const Tensor* newest) {
      for (size_t d = line.size() - 1; d >= 2; --d) copy(line[d], line[d - 1]);
      if (line.size() > 1 && newest) copy(line[1], *newest);
    };
    for (auto& line : e.input_delay) shift(line, lo == 0 ? &line[0] : nullptr);
    for (size_t m = 0; m < stages_.size(); ++m)
      for (size_t k = 0; k < e.output_delay[m].size(); ++k) {
        const bool ran = static_cast<int>(m) >= lo && static_cast<int>(m) <= hi;
        shift(e.output_delay[m][k], ran ? &outs[m][k] : nullptr);
      }
    if (static_cast<size_t>(hi) == last) r->last_outputs = outs[last];
    r->exec = S.end_capture();
  } catch (const Error& err) {
    S.abort_capture();
    throw Error(err.kind(), std::string("this pipeline cannot be captured as graphs: ") + err.what());
  } catch (...) {
    S.abort_capture();
    throw;
  }
  ++stats_.captures;
  return r;
}

void PipelinedGraph::launch(const std::vector<Tensor>* inputs, bool host_outputs,
                            std::vector<std::vector<Tensor>>& finished) {
  Entry& e = *current_;
  const size_t last = stages_.size() - 1;
  const size_t j = launched_;
  const size_t n = pushed_ + (inputs ? 1 : 0);  // items of this key once this launch is under way
  // Stage s runs item j - s where that item exists: 0 <= j - s < n.
  const int hi = static_cast<int>(std::min(last, j));
  const int lo = static_cast<int>(j + 1 - n);
  Range& r = *e.ranges.at({lo, hi});

  const std::shared_ptr<void> current = api_->make_current();
  Stream& S = *stream_;
  // The graph writes the stages' buffers: after each one's latest run.
  for (int s = lo; s <= hi; ++s) stages_[s].context->order_before(S);
  std::vector<std::shared_ptr<Storage>> device_inputs;
  if (inputs) {
    e.staging->put_inputs(S, *inputs, e.inputs, keyed_, device_inputs);
    host_outputs_.push_back(host_outputs);
    ++pushed_;
  }
  r.exec->launch(S);
  ++launched_;
  ++stats_.launches;
  stats_.nodes = r.exec->num_nodes();
  const bool finishes = static_cast<size_t>(hi) == last;
  const bool host = finishes && host_outputs_.front();
  std::vector<Tensor> outs;
  if (finishes) outs = e.staging->take_outputs(stream_, r.last_outputs, host, 0);
  auto done = api_->create_event();
  S.record(*done);
  for (auto& st : device_inputs) st->record_use(done, this);
  for (int s = lo; s <= hi; ++s) stages_[s].context->order_after(S, done);
  e.staging->hold_until(done, std::move(device_inputs));
  if (!finishes) return;
  host_outputs_.pop_front();
  if (host) {
    S.synchronize();
    e.staging->release_held();
    // Every stage: an error flag a launch without a host wait left is raised here.
    for (auto& g : stages_) g.context->check_kernel_errors();
    outs = e.staging->read_host(r.last_outputs, 0);
  } else {
    for (auto& t : outs) {
      t.set_ready_event(done);
      t.set_error_flag(stages_[last].context->error_flag());  // an index out of range surfaces when it is read
    }
  }
  finished.push_back(std::move(outs));
}

void PipelinedGraph::drain_locked(std::vector<std::vector<Tensor>>& finished) {
  while (!host_outputs_.empty()) launch(nullptr, false, finished);
  current_ = nullptr;
  launched_ = pushed_ = 0;
}

std::vector<std::vector<Tensor>> PipelinedGraph::push(const std::vector<Tensor>& inputs, bool host_outputs) {
  if (inputs.size() != num_inputs_)
    throw Error(ErrorKind::kInvalidArgument, "the pipeline takes " + std::to_string(num_inputs_) +
                                                 " inputs, got " + std::to_string(inputs.size()));
  for (const Tensor& t : inputs)
    if (!t.device().is_cpu() && t.device() != device_)
      throw Error(ErrorKind::kInvalidArgument, "a pipeline input on " + t.device().str() +
                                                   "; the pipeline runs on " + device_.str() + " (or takes host arrays)");
  std::lock_guard<std::mutex> lock(mutex_);
  // Each stage's context for the whole call, as GroupGraph::run holds them.
  std::vector<std::unique_lock<std::recursive_mutex>> held;
  for (auto& g : stages_) held.push_back(g.context->hold());
  const std::vector<Tensor> values = keyed_host_values(keyed_, inputs);
  Entry* e = nullptr;
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if ((*it)->key.matches(inputs, values, keyed_)) {
      e = it->get();
      std::rotate(it, it + 1, entries_.end());  // the most recently used last: eviction takes the front
      break;
    }
  std::vector<std::vector<Tensor>> finished = take_pending();
  try {
    if (current_ && current_ != e) drain_locked(finished);
    if (!e) {
      // A key whose capture was refused is refused again at once (not after
      // another eager run and every range's capture failing again).
      for (const Refusal& r : refused_)
        if (r.key.matches(inputs, values, keyed_)) throw Error(r.kind, r.what);
      // First sight of this key: the item runs eagerly (its answer comes
      // now), which builds the plans the captures need.
      std::vector<std::vector<Tensor>> outs;
      for (size_t s = 0; s < stages_.size(); ++s)
        outs.push_back(stages_[s].engine->run(*stages_[s].context, feeds_for(s, inputs, outs)));
      try {
        make_entry(inputs, values, outs);
      } catch (const Error& err) {
        if (refused_.size() >= kMaxKeys) refused_.pop_front();
        refused_.push_back(Refusal{GroupKey(inputs, values, keyed_), err.kind(), err.what()});
        throw;
      }
      ++stats_.eager;
      std::vector<Tensor> result = outs.back();
      if (host_outputs)
        for (auto& t : result) t = to_host(t);
      finished.push_back(std::move(result));
      return finished;
    }
    current_ = e;
    launch(&inputs, host_outputs, finished);
  } catch (...) {
    abandon(finished);
    throw;
  }
  return finished;
}

void PipelinedGraph::abandon(std::vector<std::vector<Tensor>>& finished) {
  // The items in flight are lost with the error; those finished before it
  // wait for take_finished. The next push starts afresh.
  pending_ = std::move(finished);
  try {
    stream_->synchronize();
  } catch (...) {
  }
  for (auto& e : entries_) e->staging->release_held();
  host_outputs_.clear();
  current_ = nullptr;
  launched_ = pushed_ = 0;
}

std::vector<std::vector<Tensor>> PipelinedGraph::take_pending() {
  std::vector<std::vector<Tensor>> out = std::move(pending_);
  pending_.clear();
  return out;
}

std::vector<std::vector<Tensor>> PipelinedGraph::take_finished() {
  std::lock_guard<std::mutex> lock(mutex_);
  return take_pending();
}

std::vector<std::vector<Tensor>> PipelinedGraph::drain() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::unique_lock<std::recursive_mutex>> held;
  for (auto& g : stages_) held.push_back(g.context->hold());
  std::vector<std::vector<Tensor>> finished = take_pending();
  try {
    drain_locked(finished);
  } catch (...) {
    abandon(finished);
    throw;
  }
  return finished;
}

void PipelinedGraph::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  pending_.clear();
  host_outputs_.clear();
  current_ = nullptr;
  launched_ = pushed_ = 0;
  stream_->synchronize();
  for (auto& e : entries_) e->staging->release_held();
}

}  // namespace twinfer
