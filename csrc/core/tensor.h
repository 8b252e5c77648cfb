// Tensor: a dense row-major array on one device, sharing its Storage.
// TensorView: what kernels see (raw pointer, dtype, shape), never owning.
// A sequence, optional or map value (DType::kSequence / kOptional / kMap) is
// a Tensor of shape [] whose storage holds a TensorList on the host; its
// view's data points at that list. A string tensor (DType::kString) is a host
// array of std::string: its storage constructs and destroys them, so kernels
// read and assign `std::string*` data, never copy its bytes.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/dtype.h"
#include "core/shape.h"

namespace twinfer {

struct TensorList;
class Event;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kUndefined;
  Shape shape;

  int64_t numel() const { return shape_numel(shape); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  int64_t dim(int i) const { return shape[i < 0 ? i + shape.size() : i]; }
  size_t rank() const { return shape.size(); }
  template <typename T> T* as() const { return static_cast<T*>(data); }
  // The items of a sequence/optional view; throws kDType for an array.
  const TensorList& list() const;
};

class Tensor {
 public:
  Tensor() = default;
  // A new, uninitialised tensor from the allocator of `device`.
  static Tensor empty(DType dtype, Shape shape, Device device = Device::cpu());
  // A new device tensor ordered with `stream` (Storage::allocate_on).
  static Tensor empty_on(DType dtype, Shape shape, Device device, std::shared_ptr<Stream> stream);
  // A tensor over memory someone else owns; `keep_alive` holds that owner.
  static Tensor borrow(void* data, DType dtype, Shape shape, Device device,
                       std::shared_ptr<void> keep_alive);
  static Tensor from_storage(std::shared_ptr<Storage> storage, size_t byte_offset, DType dtype,
                             Shape shape);
  // A sequence (kind kSequence) or optional (kOptional, zero or one item) of
  // `items`, whose type is `elem_type` (outermost first, see type_str); a map
  // (kMap) holds two items, its keys and its values (1-D, equally long).
  static Tensor container(DType kind, std::vector<DType> elem_type, std::vector<Tensor> items);
  // A string tensor holding `values` (row-major; as many as the shape has).
  static Tensor strings(Shape shape, std::vector<std::string> values);

  bool defined() const { return storage_ != nullptr || dtype_ != DType::kUndefined; }
  void* data() const { return storage_ ? static_cast<char*>(storage_->data()) + offset_ : nullptr; }
  template <typename T> T* data_as() const { return static_cast<T*>(data()); }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return shape_numel(shape_); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  TensorView view() const { return TensorView{data(), dtype_, shape_}; }

  // Device tensors are written asynchronously: the event after which the
  // data is valid (null: valid now). Consumers on another stream wait on it
  // (Tensor.__dlpack__(stream=...)), the host synchronises on it.
  const std::shared_ptr<Event>& ready_event() const { return ready_; }
  void set_ready_event(std::shared_ptr<Event> e) { ready_ = std::move(e); }
  // The kernel error flag of the run that wrote it (DeviceApi::
  // create_kernel_error_flag), checked where the host reads it: an index out
  // of range in that run is raised there, and no other run's is.
  const std::shared_ptr<void>& error_flag() const { return error_flag_; }
  void set_error_flag(std::shared_ptr<void> f) { error_flag_ = std::move(f); }

  // Same data, another shape with the same element count.
  Tensor reshaped(Shape shape) const;
  // The items of a sequence/optional; throws kDType for an array.
  const TensorList& list() const;
  // "float32", or "sequence(float32)" for containers.
  std::string type_name() const;

  // A deep copy on the host (the tensor must be on the host); containers
  // are copied with their items.
  Tensor clone() const;

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;
  DType dtype_ = DType::kUndefined;
  Shape shape_;
  std::shared_ptr<Event> ready_;
  std::shared_ptr<void> error_flag_;
};

// What a sequence or optional value holds. Items are never written after the
// list is built (ops make new lists), so lists share items freely.
struct TensorList {
  std::vector<DType> elem_type;  // the items' type, outermost first ({kFloat32}, {kSequence, kInt64})
  std::vector<Tensor> items;     // sequence: its elements; optional: none (empty) or one
};

}  // namespace twinfer
