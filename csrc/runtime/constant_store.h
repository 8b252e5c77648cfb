// Weights on a device: each constant is uploaded once per engine, the first
// time a plan reads it there, and shared by every plan and context after
// (plans of other shapes reuse the same weights).
#pragma once
#include <map>
#include <tuple>
#include <mutex>
#include <utility>

#include "core/tensor.h"

namespace twinfer {

class ConstantStore {
 public:
  explicit ConstantStore(Device device) : device_(device) {}
  // The device copy of host tensor `host` (uploaded synchronously on first use).
  Tensor device_copy(const Tensor& host);
  // Float32 host tensor `f32` as `to` (float16 / bfloat16), converted once
  // (precision="fp16" / "bf16" lowers weights through this).
  Tensor converted(const Tensor& f32, DType to);
  // Host tensor `t` [N, C, spatial...] as [N, spatial..., C], permuted once:
  // the channels_last pass of every plan gets the same copy (a
  // convolution's KRSC weights), and device_copy uploads it once.
  Tensor channels_last(const Tensor& t);
  size_t bytes() const;  // uploaded and still held
  // Drops the copies (uploads, conversions, permutations) whose tensors
  // nobody outside the store holds, nor through another entry: constants an
  // evicted plan folded for its shapes (a mask, a Range of positions), new
  // for every shape. The model's weights stay (the engine's graph holds them,
  // and so their conversions and uploads). Frees device memory the way cudaFree does,
  // after the device's work: call it where a plan is built, not on a run.
  // Returns the bytes released.
  size_t release_unused();

 private:
  struct Entry {
    Tensor host;    // held, so its address cannot be reused by another constant
    Tensor device;
  };
  Device device_;
  mutable std::mutex mutex_;
  std::map<std::pair<const void*, size_t>, Entry> entries_;  // (host data, bytes) -> copy
  std::map<std::tuple<const void*, size_t, DType>, Entry> conversions_;  // (f32 data, bytes, to) -> converted
  std::map<std::tuple<const void*, DType, Shape>, Entry> permutations_;  // (data, dtype, shape) -> channels-last
  size_t bytes_ = 0;
};

}  // namespace twinfer
