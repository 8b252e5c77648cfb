#include "runtime/constant_store.h"

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

namespace {

bool only_held_here(const Tensor& t) { return !t.storage() || t.storage().use_count() == 1; }

// Erases the entries whose two tensors only the map holds; true when any went.
template <typename Map>
bool erase_unheld(Map& m, size_t* released, bool count) {
  bool any = false;
  for (auto it = m.begin(); it != m.end();) {
    if (only_held_here(it->second.host) && only_held_here(it->second.device)) {
      if (count) *released += it->second.host.bytes();
      it = m.erase(it);
      any = true;
    } else {
      ++it;
    }
  }
  return any;
}

}  // namespace

size_t ConstantStore::release_unused() {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t released = 0;
  // A conversion or permutation feeds an upload (and a permutation may feed a
  // conversion): each map's entries free the next one's, so until none goes.
  for (bool any = true; any;) {
    any = erase_unheld(entries_, &released, true);
    any = erase_unheld(conversions_, &released, false) || any;
    any = erase_unheld(permutations_, &released, false) || any;
  }
  bytes_ -= released;
  return released;
}

size_t ConstantStore::bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_;
}

}  // namespace twinfer
