#include "core/tensor.h"

#include <cstring>

#include "core/error.h"
#include "core/shape_limits.h"

namespace twinfer {

static void check_shape(const Shape& shape) {
  int64_t n = 1;
  for (auto d : shape) {
    if (d < 0) throw Error(ErrorKind::kShape, "negative dimension in shape " + shape_str(shape));
    if (d > 0 && n > kMaxElements / d)
      throw Error(ErrorKind::kShape, "shape " + shape_str(shape) + " is too large");
    n *= d;
  }
}

Tensor Tensor::strings(Shape shape, std::vector<std::string> values) {
  check_shape(shape);
  if (static_cast<int64_t>(values.size()) != shape_numel(shape))
    throw Error(ErrorKind::kShape, std::to_string(values.size()) + " strings for shape " + shape_str(shape));
  // The vector owns the strings; the storage borrows its array and keeps it.
  auto owner = std::make_shared<std::vector<std::string>>(std::move(values));
  std::string* data = owner->data();
  return borrow(data, DType::kString, std::move(shape), Device::cpu(), std::move(owner));
}

Tensor Tensor::empty(DType dtype, Shape shape, Device device) {
  check_shape(shape);
  if (dtype == DType::kString) {
    if (!device.is_cpu())
      throw Error(ErrorKind::kDevice, "string tensors live on the host, not on " + device.str());
    std::vector<std::string> blank(static_cast<size_t>(shape_numel(shape)));
    return strings(std::move(shape), std::move(blank));
  }
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.storage_ = Storage::allocate(allocator_for(device), t.bytes());
  return t;
}

Tensor Tensor::empty_on(DType dtype, Shape shape, Device device, std::shared_ptr<Stream> stream) {
  check_shape(shape);
  if (dtype == DType::kString)
    throw Error(ErrorKind::kDevice, "string tensors live on the host, not on " + device.str());
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.storage_ = Storage::allocate_on(allocator_for(device), t.bytes(), std::move(stream));
  return t;
}

Tensor Tensor::borrow(void* data, DType dtype, Shape shape, Device device,
                      std::shared_ptr<void> keep_alive) {
  check_shape(shape);
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.storage_ = Storage::borrow(data, t.bytes(), device, std::move(keep_alive));
  return t;
}

Tensor Tensor::from_storage(std::shared_ptr<Storage> storage, size_t byte_offset, DType dtype,
                            Shape shape) {
  Tensor t;
  t.storage_ = std::move(storage);
  t.offset_ = byte_offset;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::reshaped(Shape shape) const {
  if (shape_numel(shape) != numel())
    throw Error(ErrorKind::kShape,
                "cannot reshape " + shape_str(shape_) + " to " + shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::container(DType kind, std::vector<DType> elem_type, std::vector<Tensor> items) {
  if (!dtype_is_container(kind))
    throw Error(ErrorKind::kDType, std::string("a container must be a sequence or an optional, not ") + dtype_name(kind));
  if (kind == DType::kOptional && items.size() > 1)
    throw Error(ErrorKind::kInvalidArgument, "an optional holds at most one value");
  if (kind == DType::kMap &&
      (items.size() != 2 || items[0].shape().size() != 1 || items[1].shape().size() != 1 ||
       items[0].numel() != items[1].numel()))
    throw Error(ErrorKind::kInvalidArgument, "a map holds two 1-D tensors of equal length, its keys and its values");
  auto list = std::make_shared<TensorList>(TensorList{std::move(elem_type), std::move(items)});
  TensorList* p = list.get();
  return borrow(p, kind, {}, Device::cpu(), std::move(list));
}

static const TensorList& list_of(void* data, DType dtype) {
  if (!dtype_is_container(dtype) || !data)
    throw Error(ErrorKind::kDType, std::string("expected a sequence, optional or map value, got ") + dtype_name(dtype));
  return *static_cast<const TensorList*>(data);
}

const TensorList& TensorView::list() const { return list_of(data, dtype); }
const TensorList& Tensor::list() const { return list_of(data(), dtype_); }

std::string Tensor::type_name() const {
  return dtype_is_container(dtype_) ? type_str(dtype_, list().elem_type) : dtype_name(dtype_);
}

Tensor Tensor::clone() const {
  if (dtype_is_container(dtype_)) {
    std::vector<Tensor> items;
    for (const Tensor& t : list().items) items.push_back(t.clone());
    return container(dtype_, list().elem_type, std::move(items));
  }
  if (!device().is_cpu()) throw Error(ErrorKind::kDevice, "clone() of a device tensor");
  if (dtype_ == DType::kString) {
    const std::string* s = data_as<const std::string>();
    return strings(shape_, std::vector<std::string>(s, s + numel()));
  }
  Tensor t = empty(dtype_, shape_);
  if (bytes()) std::memcpy(t.data(), data(), bytes());
  return t;
}

}  // namespace twinfer
