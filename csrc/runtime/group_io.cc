#include "runtime/group_io.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.h"
#include "runtime/transfer.h"
#include "runtime/value_key.h"

namespace twinfer {

Device check_group(const std::vector<GroupMember>& members, size_t num_inputs, std::vector<char>& keyed) {
  if (members.empty()) throw Error(ErrorKind::kInvalidArgument, "a group graph needs at least one member");
  const Device device = members[0].engine->device();
  if (!device.is_accelerator())
    throw Error(ErrorKind::kInvalidArgument,
                "a group is captured as one graph on a GPU; its members run on " + device.str());
  for (size_t m = 0; m < members.size(); ++m) {
    const GroupMember& g = members[m];
    if (g.engine->device() != device || !g.context || g.context->device() != device)
      throw Error(ErrorKind::kInvalidArgument, "member " + std::to_string(m) + " runs on " +
                                                   g.engine->device().str() + ", the group on " + device.str() +
                                                   ": one graph holds one device's work");
    if (g.sources.size() != g.engine->inputs().size())
      throw Error(ErrorKind::kInvalidArgument, "member " + std::to_string(m) + ": " +
                                                   std::to_string(g.sources.size()) + " sources for " +
                                                   std::to_string(g.engine->inputs().size()) + " inputs");
    for (const auto& [src, k] : g.sources) {
      const bool ok = src == -1 ? (k >= 0 && static_cast<size_t>(k) < num_inputs)
                                : (src >= 0 && static_cast<size_t>(src) < m && k >= 0 &&
                                   static_cast<size_t>(k) < members[src].engine->outputs().size());
      if (!ok)
        throw Error(ErrorKind::kInvalidArgument, "member " + std::to_string(m) + ": an input source (" +
                                                     std::to_string(src) + ", " + std::to_string(k) +
                                                     ") names no group input or earlier member's output");
    }
  }
  keyed.assign(num_inputs, 0);
  for (size_t m = 0; m < members.size(); ++m) {
    const Engine& eng = *members[m].engine;
    for (int i : eng.value_keyed_inputs()) {
      const auto [src, k] = members[m].sources[i];
      if (src == -1) {
        keyed[k] = 1;
        continue;
      }
      throw Error(ErrorKind::kInvalidArgument,
                  "member " + std::to_string(m) + "'s input '" + eng.inputs()[i].name +
                      "' picks its plan by value (a shape or steering input) and comes from member " +
                      std::to_string(src) + "'s output, which a graph cannot read before it is captured: "
                      "feed it from the group's inputs, or run the group without one graph");
    }
  }
  return device;
}

std::vector<Tensor> keyed_host_values(const std::vector<char>& keyed, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> values(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    if (keyed[i]) values[i] = inputs[i].device().is_cpu() ? inputs[i] : to_host(inputs[i]);
  return values;
}

GroupKey::GroupKey(const std::vector<Tensor>& inputs, const std::vector<Tensor>& vals, const std::vector<char>& keyed) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    shapes.push_back(inputs[i].shape());
    dtypes.push_back(inputs[i].dtype());
    values.push_back(keyed[i] ? vals[i].clone() : Tensor());
  }
}

bool GroupKey::matches(const std::vector<Tensor>& inputs, const std::vector<Tensor>& vals,
                       const std::vector<char>& keyed) const {
  for (size_t i = 0; i < inputs.size(); ++i)
    if (shapes[i] != inputs[i].shape() || dtypes[i] != inputs[i].dtype() ||
        (keyed[i] && !same_value(values[i], vals[i])))
      return false;
  return true;
}

namespace {
size_t padded(size_t bytes) { return (bytes + 255) / 256 * 256; }
}  // namespace

GroupStaging::GroupStaging(DeviceApi& api, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs)
    : api_(&api), device_(api.device()) {
  size_t bytes = 0;
  for (const Tensor& t : inputs) {
    in_offsets_.push_back(bytes);
    bytes += padded(t.bytes());
  }
  for (const Tensor& t : outputs) {
    out_offsets_.push_back(bytes);
    bytes += padded(t.bytes());
  }
  staging_ = Storage::allocate(api.pinned_allocator(), std::max<size_t>(bytes, 256));
  staged_ = api.create_event();
}

void GroupStaging::put_inputs(Stream& s, const std::vector<Tensor>& inputs, const std::vector<Tensor>& dst,
                              const std::vector<char>& keyed, std::vector<std::shared_ptr<Storage>>& device_inputs) {
  char* staging = static_cast<char*>(staging_->data());
  bool staged = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (keyed[i]) continue;
    if (t.device() == device_) {
      if (t.ready_event()) wait_across_capture(s, *t.ready_event());
      s.copy(dst[i].data(), t.data(), t.bytes());
      if (t.storage()) device_inputs.push_back(t.storage());
      continue;
    }
    // The last launch's copies out of staging must be done before it is rewritten.
    if (staging_pending_ && !staged) host_wait(*staged_);
    staging_pending_ = false;
    staged = true;
    char* st = staging + in_offsets_[i];
    api_->host_access({st, t.bytes()}, true, "staging a group input");
    if (t.bytes()) std::memcpy(st, t.data(), t.bytes());
    s.copy(dst[i].data(), st, t.bytes());
  }
  if (staged) {
    s.record(*staged_);
    staging_pending_ = true;
  }
}

std::vector<Tensor> GroupStaging::take_outputs(const std::shared_ptr<Stream>& s, const std::vector<Tensor>& values,
                                               bool host, size_t first) {
  std::vector<Tensor> outs;
  char* staging = static_cast<char*>(staging_->data());
  for (size_t k = 0; k < values.size(); ++k) {
    const Tensor& v = values[k];
    if (host) {
      s->copy(staging + out_offsets_[first + k], v.data(), v.bytes());
      continue;
    }
    Tensor t = Tensor::empty_on(v.dtype(), v.shape(), device_, s);
    s->copy(t.data(), v.data(), v.bytes());
    outs.push_back(std::move(t));
  }
  return outs;
}

void GroupStaging::hold_until(std::shared_ptr<Event> done, std::vector<std::shared_ptr<Storage>> storages) {
  while (!held_.empty() && held_.front().first->ready()) held_.pop_front();
  if (!storages.empty()) held_.emplace_back(std::move(done), std::move(storages));
}

std::vector<Tensor> GroupStaging::read_host(const std::vector<Tensor>& values, size_t first) {
  std::vector<Tensor> outs;
  const char* staging = static_cast<const char*>(staging_->data());
  for (size_t k = 0; k < values.size(); ++k) {
    const Tensor& v = values[k];
    Tensor h = Tensor::empty(v.dtype(), v.shape(), Device::cpu());
    const char* st = staging + out_offsets_[first + k];
    api_->host_access({st, h.bytes()}, false, "reading a group output");
    if (h.bytes()) std::memcpy(h.data(), st, h.bytes());
    outs.push_back(std::move(h));
  }
  return outs;
}

}  // namespace twinfer
