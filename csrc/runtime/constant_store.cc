#include "runtime/constant_store.h"

#include <map>
#include <set>

#include "core/error.h"
#include "core/half.h"
#include "ops/nn/channels_last.h"
#include "runtime/transfer.h"

namespace twinfer {

Tensor ConstantStore::device_copy(const Tensor& host) {
  const std::pair<const void*, size_t> key{host.data(), host.bytes()};
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(key);
  // The same bytes viewed as another dtype or shape share the upload.
  if (it != entries_.end()) return Tensor::from_storage(it->second.device.storage(), 0, host.dtype(), host.shape());
  Tensor dev = to_device(host, device_);
  entries_[key] = Entry{host, dev};
  bytes_ += host.bytes();
  return dev;
}

Tensor ConstantStore::converted(const Tensor& f32, DType to) {
  if (f32.dtype() != DType::kFloat32 || (to != DType::kFloat16 && to != DType::kBFloat16))
    throw Error(ErrorKind::kDType, std::string("cannot convert ") + dtype_name(f32.dtype()) + " weights to " +
                                       dtype_name(to));
  const auto key = std::make_tuple(static_cast<const void*>(f32.data()), f32.bytes(), to);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = conversions_.find(key);
  if (it != conversions_.end())
    return Tensor::from_storage(it->second.device.storage(), 0, to, f32.shape());
  Tensor out = Tensor::empty(to, f32.shape());
  const float* src = f32.data_as<float>();
  uint16_t* dst = static_cast<uint16_t*>(out.data());
  const int64_t n = f32.numel();
  // Saturating: a constant beyond 16 bits' range (a mask's finfo.min) keeps
  // its sign and stays finite, as onnxconverter-common's fp16 converter does.
  for (int64_t i = 0; i < n; ++i)
    dst[i] = to == DType::kFloat16 ? float_to_half_saturate(src[i]) : float_to_bf16_saturate(src[i]);
  conversions_[key] = Entry{f32, out};
  return out;
}

Tensor ConstantStore::channels_last(const Tensor& t) {
  // The shape is part of the key: a view of the same bytes under another
  // shape permutes differently.
  const auto key = std::make_tuple(static_cast<const void*>(t.data()), t.dtype(), t.shape());
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = permutations_.find(key);
  if (it == permutations_.end()) it = permutations_.emplace(key, Entry{t, nn::to_channels_last(t)}).first;
  return it->second.device;
}

size_t ConstantStore::release_unused() {
  std::lock_guard<std::mutex> lock(mutex_);
  // The store's maps hold one another's tensors (a conversion's result is an
  // upload's host tensor; a permutation's feeds a conversion or an upload).
  // A block is in use when someone outside the store holds it (a plan, the
  // engine's graph: more references than the maps'), and so is every block of
  // an entry that holds a block in use. Entries holding none go.
  struct Holds {
    long by_maps = 0, in_all = 0;  // in_all: use_count, the maps' references and everyone else's
  };
  std::map<const Storage*, Holds> holds;
  const auto each_entry = [&](auto&& f) {
    for (auto& kv : entries_) f(kv.second);
    for (auto& kv : conversions_) f(kv.second);
    for (auto& kv : permutations_) f(kv.second);
  };
  each_entry([&](const Entry& e) {
    for (const Tensor* t : {&e.host, &e.device})
      if (t->storage()) {
        Holds& h = holds[t->storage().get()];
        ++h.by_maps;
        h.in_all = t->storage().use_count();
      }
  });
  std::set<const Storage*> in_use;
  for (const auto& [block, h] : holds)
    if (h.in_all > h.by_maps) in_use.insert(block);
  const auto uses = [&](const Entry& e) {
    return (e.host.storage() && in_use.count(e.host.storage().get())) ||
           (e.device.storage() && in_use.count(e.device.storage().get()));
  };
  for (bool grew = true; grew;) {
    grew = false;
    each_entry([&](const Entry& e) {
      if (!uses(e)) return;
      for (const Tensor* t : {&e.host, &e.device})
        if (t->storage() && in_use.insert(t->storage().get()).second) grew = true;
    });
  }
  size_t released = 0;
  const auto erase_unused = [&](auto& m, bool count) {
    for (auto it = m.begin(); it != m.end();) {
      if (uses(it->second)) {
        ++it;
        continue;
      }
      if (count) released += it->second.host.bytes();
      it = m.erase(it);
    }
  };
  erase_unused(entries_, true);
  erase_unused(conversions_, false);
  erase_unused(permutations_, false);
  bytes_ -= released;
  return released;
}

size_t ConstantStore::bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_;
}

}  // namespace twinfer
