// The per-call fast path of Engine.run's inputs: {name: array} in the engine's
// order without a Python-level conversion. Only the common cases are taken
// (exact NumPy arrays that are compact and native, twinfer.Tensors); for any
// other value the caller falls back to python/twinfer/_convert.py, which
// handles the rest and words the errors. What the fast path takes, it wraps
// exactly as the DLPack route would: a borrowed view of the same memory.
#include <pybind11/numpy.h>

#include "bindings/tensor_convert.h"

namespace py = pybind11;

namespace twinfer::bindings {

namespace {

// The twinfer dtype of a NumPy descriptor DLPack carries as it is
// (kind + width), kUndefined for any other (ml_dtypes' types, objects,
// strings, complex, non-native byte order).
DType numpy_dtype_of(const py::dtype& dt) {
  if (dt.byteorder() == '>') return DType::kUndefined;
  const auto size = dt.itemsize();
  switch (dt.kind()) {
    case 'f': return size == 4 ? DType::kFloat32 : size == 8 ? DType::kFloat64 : size == 2 ? DType::kFloat16
                                                                                          : DType::kUndefined;
    case 'i': return size == 1 ? DType::kInt8 : size == 2 ? DType::kInt16 : size == 4 ? DType::kInt32
                                                                       : size == 8 ? DType::kInt64 : DType::kUndefined;
    case 'u': return size == 1 ? DType::kUInt8 : size == 2 ? DType::kUInt16 : size == 4 ? DType::kUInt32
                                                                        : size == 8 ? DType::kUInt64 : DType::kUndefined;
    case 'b': return size == 1 ? DType::kBool : DType::kUndefined;
    default: return DType::kUndefined;
  }
}

// Holds a Python object for as long as a tensor borrows its memory; the
// reference is dropped with the GIL held, from whichever thread lets go last.
std::shared_ptr<void> keep_alive(py::handle o) {
  return std::shared_ptr<void>(o.inc_ref().ptr(), [](void* p) {
    if (!Py_IsInitialized()) return;  // interpreter gone: nothing left to release
    py::gil_scoped_acquire gil;
    Py_DECREF(static_cast<PyObject*>(p));
  });
}

// An exact NumPy array that is compact, aligned and of a dtype DLPack
// carries, as a borrowed host tensor.
bool numpy_tensor(py::handle x, Tensor* out) {
  auto& api = py::detail::npy_api::get();
  if (Py_TYPE(x.ptr()) != api.PyArray_Type_) return false;  // subclasses: the general path
  const auto* a = py::detail::array_proxy(x.ptr());
  constexpr int kCompact = py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_ | py::detail::npy_api::NPY_ARRAY_ALIGNED_;
  if ((a->flags & kCompact) != kCompact) return false;
  const DType dtype = numpy_dtype_of(py::reinterpret_borrow<py::dtype>(a->descr));
  if (dtype == DType::kUndefined) return false;
  Shape shape(a->dimensions, a->dimensions + a->nd);
  *out = Tensor::borrow(a->data, dtype, std::move(shape), Device::cpu(), keep_alive(x));
  return true;
}

}  // namespace

bool fast_tensor(py::handle x, Tensor* out) {
  if (numpy_tensor(x, out)) return true;  // first: its type test is one pointer compare
  if (!py::isinstance<Tensor>(x)) return false;
  *out = x.cast<const Tensor&>();
  return true;
}

bool fast_feeds(py::handle feeds, py::handle names, std::vector<Tensor>* out) {
  if (!PyDict_CheckExact(feeds.ptr()) || !PyTuple_CheckExact(names.ptr())) return false;
  const Py_ssize_t n = PyTuple_GET_SIZE(names.ptr());
  if (PyDict_GET_SIZE(feeds.ptr()) != n) return false;  // an unknown name: the general path says which
  out->resize(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* x = PyDict_GetItemWithError(feeds.ptr(), PyTuple_GET_ITEM(names.ptr(), i));
    if (!x) {
      if (PyErr_Occurred()) throw py::error_already_set();
      return false;  // a missing input
    }
    if (!fast_tensor(x, &(*out)[static_cast<size_t>(i)])) return false;
  }
  return true;
}

}  // namespace twinfer::bindings
