// twinfer.Tensor: shape/dtype/device, zero-copy NumPy views, and DLPack in
// both directions (legacy "dltensor" and versioned "dltensor_versioned").
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>

#include "bindings/bindings.h"
#include "bindings/tensor_convert.h"
#include "core/dlpack_abi.h"
#include "core/device_api.h"
#include "core/error.h"
#include "runtime/transfer.h"

namespace py = pybind11;

namespace twinfer::bindings {

namespace {

// DLPack 1.1 type codes of the 8-bit floats (PyTorch exports float8 with these;
// NumPy has none, so ml_dtypes arrays come in through a uint8 view instead).
constexpr uint8_t kDLFloat8_e4m3fn = 10, kDLFloat8_e4m3fnuz = 11, kDLFloat8_e5m2 = 12,
                  kDLFloat8_e5m2fnuz = 13, kDLFloat8_e8m0fnu = 14;

dlpack::DataType to_dl_dtype(DType t) {
  switch (t) {
    case DType::kFloat32: return {dlpack::kFloat, 32, 1};
    case DType::kFloat16: return {dlpack::kFloat, 16, 1};
    case DType::kFloat64: return {dlpack::kFloat, 64, 1};
    case DType::kBFloat16: return {dlpack::kBfloat, 16, 1};
    case DType::kInt8: return {dlpack::kInt, 8, 1};
    case DType::kInt16: return {dlpack::kInt, 16, 1};
    case DType::kInt32: return {dlpack::kInt, 32, 1};
    case DType::kInt64: return {dlpack::kInt, 64, 1};
    case DType::kUInt8: return {dlpack::kUInt, 8, 1};
    case DType::kUInt16: return {dlpack::kUInt, 16, 1};
    case DType::kUInt32: return {dlpack::kUInt, 32, 1};
    case DType::kUInt64: return {dlpack::kUInt, 64, 1};
    case DType::kBool: return {dlpack::kBool, 8, 1};
    case DType::kFloat8E4M3FN: return {kDLFloat8_e4m3fn, 8, 1};
    case DType::kFloat8E4M3FNUZ: return {kDLFloat8_e4m3fnuz, 8, 1};
    case DType::kFloat8E5M2: return {kDLFloat8_e5m2, 8, 1};
    case DType::kFloat8E5M2FNUZ: return {kDLFloat8_e5m2fnuz, 8, 1};
    case DType::kFloat8E8M0: return {kDLFloat8_e8m0fnu, 8, 1};
    default: throw Error(ErrorKind::kDType, std::string("dtype ") + dtype_name(t) + " has no DLPack code");
  }
}

DType from_dl_dtype(dlpack::DataType d) {
  if (d.lanes != 1) throw Error(ErrorKind::kDType, "vector (lanes != 1) DLPack dtypes are not supported");
  switch (d.code) {
    case dlpack::kFloat:
      if (d.bits == 32) return DType::kFloat32;
      if (d.bits == 16) return DType::kFloat16;
      if (d.bits == 64) return DType::kFloat64;
      break;
    case dlpack::kBfloat:
      if (d.bits == 16) return DType::kBFloat16;
      break;
    case dlpack::kInt:
      if (d.bits == 8) return DType::kInt8;
      if (d.bits == 16) return DType::kInt16;
      if (d.bits == 32) return DType::kInt32;
      if (d.bits == 64) return DType::kInt64;
      break;
    case dlpack::kUInt:
      if (d.bits == 8) return DType::kUInt8;
      if (d.bits == 16) return DType::kUInt16;
      if (d.bits == 32) return DType::kUInt32;
      if (d.bits == 64) return DType::kUInt64;
      break;
    case dlpack::kBool:
      if (d.bits == 8) return DType::kBool;
      break;
    case kDLFloat8_e4m3fn: if (d.bits == 8) return DType::kFloat8E4M3FN; break;
    case kDLFloat8_e4m3fnuz: if (d.bits == 8) return DType::kFloat8E4M3FNUZ; break;
    case kDLFloat8_e5m2: if (d.bits == 8) return DType::kFloat8E5M2; break;
    case kDLFloat8_e5m2fnuz: if (d.bits == 8) return DType::kFloat8E5M2FNUZ; break;
    case kDLFloat8_e8m0fnu: if (d.bits == 8) return DType::kFloat8E8M0; break;
  }
  throw Error(ErrorKind::kDType, "unsupported DLPack dtype (code " + std::to_string(d.code) + ", " +
                                     std::to_string(d.bits) + " bits)");
}

// The simulated device travels as DLPack's "extension device" (kDLExtDev):
// NumPy and the frameworks refuse it, as they must refuse memory the host
// may not read; twinfer takes it back.
constexpr int32_t kDLExtDev = 12;

Device from_dl_device(dlpack::Device d) {
  if (d.device_type == dlpack::kCPU || d.device_type == dlpack::kCUDAHost) return Device::cpu();
  if (d.device_type == dlpack::kCUDA) return Device::cuda(d.device_id);
  if (d.device_type == kDLExtDev) return Device::sim(d.device_id);
  throw Error(ErrorKind::kDevice, "unsupported DLPack device type " + std::to_string(d.device_type));
}

dlpack::Device to_dl_device(Device d) {
  switch (d.type) {
    case DeviceType::kCPU: return dlpack::Device{dlpack::kCPU, 0};
    case DeviceType::kCUDA: return dlpack::Device{dlpack::kCUDA, d.index};
    case DeviceType::kSim: return dlpack::Device{kDLExtDev, d.index};
  }
  return dlpack::Device{dlpack::kCPU, 0};
}

// DLPack's stream protocol, producer side: make the consumer's `stream` wait
// until `t` is ready. CUDA values: None -> the legacy default stream,
// -1 -> no synchronisation, 1 / 2 -> the legacy / per-thread default
// stream, anything else a cudaStream_t. The simulated device has no default
// stream: None makes the host wait.
// Returns the consumer's stream (null when the host is the consumer or the
// caller asked for no synchronisation).
std::shared_ptr<Stream> make_ready_for(const Tensor& t, const py::object& stream) {
  if (!t.device().is_accelerator()) return nullptr;
  const auto& ev = t.ready_event();
  std::shared_ptr<Stream> consumer;
  if (stream.is_none()) {
    if (t.device().is_cuda()) {
      consumer = device_api(t.device()).borrow_stream(1);
    } else {
      if (ev) {
        py::gil_scoped_release nogil;
        host_wait(*ev);
      }
      return nullptr;
    }
  } else {
    if (!py::isinstance<py::int_>(stream))
      throw py::type_error("DLPack stream must be an int (-1, 1, 2 or a stream handle), not " +
                           std::string(py::str(py::type::of(stream).attr("__name__"))));
    const long long h = stream.cast<long long>();
    if (h == -1) return nullptr;
    if (h < -1) throw py::value_error("DLPack stream must be -1, 1, 2 or a stream handle, not " + std::to_string(h));
    // 0 is ambiguous in the spec: the legacy default stream.
    consumer = device_api(t.device()).borrow_stream(h == 0 && t.device().is_cuda() ? 1 : static_cast<uintptr_t>(h));
  }
  if (ev) wait_across_capture(*consumer, *ev);
  return consumer;
}

// Copies a strided host array into a compact one, element by element.
Tensor compact_copy(const dlpack::DLTensor& t, DType dtype, const Shape& shape) {
  Tensor out = Tensor::empty(dtype, shape);
  const size_t es = dtype_size(dtype);
  const int64_t n = out.numel();
  const char* src = static_cast<const char*>(t.data) + t.byte_offset;
  char* dst = static_cast<char*>(out.data());
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < shape.size(); ++d) off += idx[d] * t.strides[d];
    std::memcpy(dst + i * es, src + off * static_cast<int64_t>(es), es);
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

// Wraps a DLTensor whose owner is released by `release` (called with the GIL held).
Tensor import_dltensor(const dlpack::DLTensor& t, std::shared_ptr<void> owner) {
  DType dtype = from_dl_dtype(t.dtype);
  Device dev = from_dl_device(t.device);
  if (t.ndim < 0 || t.ndim > 64) throw Error(ErrorKind::kShape, "DLPack tensor has an invalid rank");
  Shape shape(t.shape, t.shape + t.ndim);
  bool compact = true;
  if (t.strides) {
    int64_t expect = 1;
    for (int d = t.ndim - 1; d >= 0; --d) {
      if (shape[d] != 1 && t.strides[d] != expect) compact = false;
      expect *= shape[d];
    }
  }
  if (compact || shape_numel(shape) == 0)
    return Tensor::borrow(static_cast<char*>(t.data) + t.byte_offset, dtype, shape, dev, std::move(owner));
  if (!dev.is_cpu())
    throw Error(ErrorKind::kInvalidArgument, "non-contiguous device tensors are not supported; call .contiguous() first");
  return compact_copy(t, dtype, shape);
}

// Releases a foreign DLPack owner, taking the GIL when Python is still alive.
template <typename M>
std::shared_ptr<void> owner_of(M* mt) {
  return std::shared_ptr<void>(mt, [](void* p) {
    M* m = static_cast<M*>(p);
    if (!m->deleter) return;
    if (Py_IsInitialized()) {
      py::gil_scoped_acquire gil;
      m->deleter(m);
    } else {
      m->deleter(m);
    }
  });
}

// Whether `consumer` (the stream a DLPack consumer named) is sure to outlive
// the tensor exported to it, so that the export's release may record on it.
// Recording on a stream its owner has destroyed crashes inside the driver,
// and a handle cannot be checked: so only streams known to live on are
// trusted. Those are ours, the default streams, and torch's pooled streams
// (torch never destroys them: the stream torch.from_dlpack names unless the
// caller made it current through torch.cuda.ExternalStream).
bool outlives_exports(const std::shared_ptr<Stream>& consumer) {
  if (!consumer) return false;
  if (!consumer->borrowed() || consumer->handle() <= 2) return true;
  try {
    py::object modules = py::module_::import("sys").attr("modules");
    if (!modules.contains("torch")) return false;
    py::object cuda = modules["torch"].attr("cuda");
    if (!cuda.attr("is_initialized")().cast<bool>()) return false;
    py::object current = cuda.attr("current_stream")(consumer->device().index);
    // torch.cuda.current_stream() gives a plain Stream even inside
    // `with torch.cuda.stream(ExternalStream(h))`; its id tells: c10 keeps
    // an external stream's cudaStream_t as its id (lowest bit 0), pooled
    // streams' ids have the lowest bit set (c10/cuda/CUDAStream.cpp), and the
    // default stream's is 0 (its handle is the legacy stream's, trusted above).
    const int64_t id = current.attr("stream_id").cast<int64_t>();
    if (id != 0 && (id & 1) == 0) return false;
    return current.attr("cuda_stream").cast<uintptr_t>() == consumer->handle();
  } catch (const std::exception&) {  // py::error_already_set, py::cast_error: not torch's as we know it
    return false;
  }
}

struct ExportHolder {
  Tensor tensor;
  Shape shape;
  Shape strides;
  // A device tensor exported to a consumer's stream that outlives it
  // (outlives_exports): when the consumer lets go, its stream's work so far
  // may still read the memory, so the block's stream-ordered free waits for
  // an event recorded there then. Null for any other stream: the block is
  // freed in our stream's order, so work the caller queued on such a stream
  // that still reads it must be done (or that stream synchronised) before
  // the last reference goes (docs/api.md, DLPack).
  std::shared_ptr<Stream> consumer;

  ~ExportHolder() {
    if (!consumer || !tensor.storage()) return;
    try {
      auto ev = device_api(tensor.device()).create_event();
      consumer->record(*ev);
      tensor.storage()->record_use(std::move(ev), reinterpret_cast<const void*>(consumer->handle()));
    } catch (...) {
      // A stream destroyed before its tensor: nothing left to wait for.
    }
  }
};

template <typename M>
M* make_managed(const Tensor& t, std::shared_ptr<Stream> consumer) {
  auto* h = new ExportHolder{t, t.shape(), contiguous_strides(t.shape()), std::move(consumer)};
  auto* m = new M{};
  m->manager_ctx = h;
  m->deleter = [](M* self) {
    delete static_cast<ExportHolder*>(self->manager_ctx);
    delete self;
  };
  auto& d = m->dl_tensor;
  d.data = t.data();
  d.device = to_dl_device(t.device());
  d.ndim = static_cast<int32_t>(h->shape.size());
  d.dtype = to_dl_dtype(t.dtype());
  d.shape = h->shape.data();
  d.strides = h->strides.data();
  d.byte_offset = 0;
  return m;
}

py::capsule export_capsule(const Tensor& t, bool versioned, std::shared_ptr<Stream> consumer = nullptr,
                           bool copied = false) {
  if (versioned) {
    auto* m = make_managed<dlpack::ManagedTensorVersioned>(t, consumer);
    m->version = {1, 0};
    m->flags = copied ? dlpack::kFlagIsCopied : 0;
    return py::capsule(m, "dltensor_versioned", [](PyObject* cap) {
      if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
        auto* mt = static_cast<dlpack::ManagedTensorVersioned*>(PyCapsule_GetPointer(cap, "dltensor_versioned"));
        if (mt && mt->deleter) mt->deleter(mt);
      }
    });
  }
  auto* m = make_managed<dlpack::ManagedTensor>(t, consumer);
  return py::capsule(m, "dltensor", [](PyObject* cap) {
    if (PyCapsule_IsValid(cap, "dltensor")) {
      auto* mt = static_cast<dlpack::ManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
      if (mt && mt->deleter) mt->deleter(mt);
    }
  });
}

py::dtype numpy_dtype(DType t) {
  switch (t) {
    case DType::kFloat32: return py::dtype::of<float>();
    case DType::kFloat64: return py::dtype::of<double>();
    case DType::kFloat16: return py::dtype("float16");
    case DType::kBFloat16: return py::module_::import("ml_dtypes").attr("bfloat16").cast<py::object>().attr("dtype").cast<py::dtype>();
    case DType::kInt8: return py::dtype::of<int8_t>();
    case DType::kInt16: return py::dtype::of<int16_t>();
    case DType::kInt32: return py::dtype::of<int32_t>();
    case DType::kInt64: return py::dtype::of<int64_t>();
    case DType::kUInt8: return py::dtype::of<uint8_t>();
    case DType::kUInt16: return py::dtype::of<uint16_t>();
    case DType::kUInt32: return py::dtype::of<uint32_t>();
    case DType::kUInt64: return py::dtype::of<uint64_t>();
    case DType::kBool: return py::dtype::of<bool>();
    case DType::kFloat8E4M3FN:
    case DType::kFloat8E4M3FNUZ:
    case DType::kFloat8E5M2:
    case DType::kFloat8E5M2FNUZ:
    case DType::kFloat8E8M0:  // dtype_name is the ml_dtypes name
    case DType::kInt4:        // the sub-byte types: ml_dtypes holds them one per byte, as we do
    case DType::kUInt4:
    case DType::kFloat4E2M1:
    case DType::kInt2:
    case DType::kUInt2:
      return py::module_::import("ml_dtypes").attr(dtype_name(t)).cast<py::object>().attr("dtype").cast<py::dtype>();
    default: throw Error(ErrorKind::kDType, std::string("no NumPy dtype for ") + dtype_name(t));
  }
}

}  // namespace

Tensor tensor_from_capsule(py::capsule cap) {
  const char* name = cap.name();
  if (name && std::strcmp(name, "dltensor_versioned") == 0) {
    auto* mt = static_cast<dlpack::ManagedTensorVersioned*>(PyCapsule_GetPointer(cap.ptr(), name));
    if (mt->version.major > 1)
      throw Error(ErrorKind::kInvalidArgument, "DLPack major version " + std::to_string(mt->version.major) + " is not supported");
    PyCapsule_SetName(cap.ptr(), "used_dltensor_versioned");
    Tensor t = import_dltensor(mt->dl_tensor, owner_of(mt));
    // Read-only host memory (a NumPy array mapped read-only, say) is copied:
    // a twinfer tensor is writable, and so is its NumPy view, and a write
    // through an alias of read-only pages would crash the interpreter.
    if ((mt->flags & dlpack::kFlagReadOnly) && t.device().is_cpu() && !dtype_is_container(t.dtype())) return t.clone();
    return t;
  }
  if (name && std::strcmp(name, "dltensor") == 0) {
    auto* mt = static_cast<dlpack::ManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), name));
    PyCapsule_SetName(cap.ptr(), "used_dltensor");
    return import_dltensor(mt->dl_tensor, owner_of(mt));
  }
  throw Error(ErrorKind::kInvalidArgument, "object is not an unused DLPack capsule");
}

// A string tensor as a NumPy array of Python str objects (the form onnx and
// onnxruntime use). Bytes that are not UTF-8 come back as surrogate escapes,
// so feeding the result back gives the same bytes.
py::object strings_to_numpy(const Tensor& t) {
  py::array out(py::dtype("O"), std::vector<py::ssize_t>(t.shape().begin(), t.shape().end()));
  auto** slots = static_cast<PyObject**>(out.mutable_data());
  const std::string* s = t.data_as<const std::string>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    PyObject* o = PyUnicode_DecodeUTF8(s[i].data(), static_cast<Py_ssize_t>(s[i].size()), "surrogateescape");
    if (!o) throw py::error_already_set();
    Py_XDECREF(slots[i]);  // NumPy fills a new object array with None
    slots[i] = o;
  }
  return std::move(out);
}

// Strings (or bytes) from Python as a string tensor of `shape`.
Tensor strings_from_py(const py::sequence& values, const Shape& shape) {
  std::vector<std::string> v;
  v.reserve(py::len(values));
  for (const py::handle& h : values) {
    if (PyUnicode_Check(h.ptr())) {
      py::object b = py::reinterpret_steal<py::object>(PyUnicode_AsEncodedString(h.ptr(), "utf-8", "surrogateescape"));
      if (!b) throw py::error_already_set();
      v.emplace_back(PyBytes_AS_STRING(b.ptr()), static_cast<size_t>(PyBytes_GET_SIZE(b.ptr())));
    } else if (PyBytes_Check(h.ptr())) {
      v.emplace_back(PyBytes_AS_STRING(h.ptr()), static_cast<size_t>(PyBytes_GET_SIZE(h.ptr())));
    } else {
      throw Error(ErrorKind::kDType, std::string("a string tensor takes str or bytes items, not ") +
                                         Py_TYPE(h.ptr())->tp_name);
    }
  }
  return Tensor::strings(shape, std::move(v));
}

namespace {
// Another tensor over t's storage from byte `offset` of it, ready when t
// is: a run reading the view waits for t's writer and sees its errors.
Tensor view_of(const Tensor& t, size_t offset, DType dtype, const Shape& shape) {
  Tensor v = Tensor::from_storage(t.storage(), offset, dtype, shape);
  v.set_ready_event(t.ready_event());
  v.set_error_flag(t.error_flag());
  return v;
}
}  // namespace

py::object tensor_to_numpy(const Tensor& in) {
  if (in.dtype() == DType::kString) return strings_to_numpy(in);
  Tensor t = in;
  if (t.device().is_accelerator()) {
    // A device tensor: wait until it is ready, copy it to the host.
    py::gil_scoped_release nogil;
    t = to_host(in);
  }
  auto* keep = new Tensor(t);
  py::capsule base(keep, [](void* p) { delete static_cast<Tensor*>(p); });
  py::dtype dt = numpy_dtype(t.dtype());
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  std::vector<py::ssize_t> strides;
  for (auto s : contiguous_strides(t.shape())) strides.push_back(s * static_cast<py::ssize_t>(dtype_size(t.dtype())));
  return py::array(dt, shape, strides, t.data(), base);
}

void bind_tensor(py::module_& m) {
  py::class_<Tensor>(m, "Tensor", "A dense array owned by twinfer (host or device memory).")
      .def_property_readonly("shape", [](const Tensor& t) { return py::tuple(py::cast(t.shape())); })
      .def_property_readonly("dtype", [](const Tensor& t) { return t.type_name(); })
      .def_property_readonly("device", [](const Tensor& t) { return t.device().str(); })
      .def_property_readonly("ndim", [](const Tensor& t) { return t.shape().size(); })
      .def_property_readonly("size", &Tensor::numel)
      .def_property_readonly("nbytes", &Tensor::bytes)
      .def_property_readonly("data_ptr", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data()); })
      .def("numpy", &tensor_to_numpy,
           "A NumPy view of the same memory (no copy) for a host tensor; for a device tensor a host copy, "
           "made once the device has written it.")
      .def("cpu", [](const Tensor& t) {
             py::gil_scoped_release nogil;
             return to_host(t);
           },
           "The tensor on the host (itself if it is there already; a device tensor is waited for and copied).")
      .def("synchronize",
           [](const Tensor& t) {
             if (!t.ready_event()) return;
             py::gil_scoped_release nogil;
             host_wait(*t.ready_event());
             if (t.error_flag()) device_api(t.device()).check_kernel_errors(t.error_flag().get());
           },
           "Block until a device tensor has been written (raises the error of a failed run).")
      .def(
          "_mark_ready_on",
          [](Tensor& t, Stream& s) {
            auto e = device_api(s.device()).create_event();
            s.record(*e);
            t.set_ready_event(std::move(e));
          },
          py::arg("stream"),
          "Marks the tensor ready at the point `stream` has reached now: an array a framework exported for that "
          "stream (DLPack), which runs on other streams then wait for.")
      .def(
          "_mark_ready_on",
          [](Tensor& t, uintptr_t handle) {
            auto s = device_api(t.device()).borrow_stream(handle);
            auto e = device_api(t.device()).create_event();
            s->record(*e);
            t.set_ready_event(std::move(e));
          },
          py::arg("handle"), "The same, for a stream given by its handle (a framework's cudaStream_t, 1 or 2).")
      .def_property_readonly("ready", [](const Tensor& t) {
                               return !t.ready_event() || t.ready_event()->captured() || t.ready_event()->ready();
                             },
                             "False while the device is still writing this tensor.")
      .def("__array__",
           [](const Tensor& t, py::object dtype, py::object copy) {
             py::object a = tensor_to_numpy(t);
             if (!dtype.is_none()) a = a.attr("astype")(dtype);
             if (!copy.is_none() && copy.cast<bool>()) a = a.attr("copy")();
             return a;
           },
           py::arg("dtype") = py::none(), py::arg("copy") = py::none())
      .def("__dlpack__",
           [](const Tensor& t, py::object stream, py::object max_version, py::object dl_device, py::object copy) {
             // Device tensors: the consumer's stream waits until ours wrote it.
             std::shared_ptr<Stream> consumer = make_ready_for(t, stream);
             std::shared_ptr<Stream> release_on = outlives_exports(consumer) ? consumer : nullptr;
             // The per-thread default stream names the releasing thread's own,
             // maybe not the consumer's: the legacy default stream orders
             // after every thread's (both are blocking streams).
             if (release_on && release_on->borrowed() && release_on->handle() == 2)
               release_on = device_api(t.device()).borrow_stream(1);
             if (!dl_device.is_none()) {
               auto dev = dl_device.cast<std::pair<int, int>>();
               auto ours = to_dl_device(t.device());
               if (dev.first != ours.device_type || dev.second != ours.device_id)
                 throw py::buffer_error("twinfer.Tensor cannot export to another device");
             }
             bool versioned = false;
             if (!max_version.is_none()) versioned = max_version.cast<std::pair<int, int>>().first >= 1;
             const bool want_copy = !copy.is_none() && copy.cast<bool>();
             if (!want_copy) return export_capsule(t, versioned, std::move(release_on));
             if (!t.device().is_accelerator()) return export_capsule(t.clone(), versioned, std::move(release_on), true);
             // A device copy, made in the consumer's stream order (after the
             // wait above) where that stream outlives the copy, whose memory
             // is freed in its order; else on the transfer stream after the
             // tensor's writes, the consumer's stream (if any) waiting for
             // it and the host waiting where there is none.
             std::shared_ptr<Stream> s = release_on ? release_on : transfer_stream(t.device());
             if (s != consumer && t.ready_event()) wait_across_capture(*s, *t.ready_event());
             Tensor c = Tensor::empty_on(t.dtype(), t.shape(), t.device(), s);
             s->copy(c.data(), t.data(), t.bytes());
             auto done = device_api(t.device()).create_event();
             s->record(*done);
             if (!consumer) {  // no consumer stream to order it: done when handed over
               py::gil_scoped_release nogil;
               host_wait(*done);
             } else if (s != consumer) {
               wait_across_capture(*consumer, *done);
             }
             c.set_ready_event(std::move(done));
             return export_capsule(c, versioned, std::move(release_on), true);
           },
           py::arg("stream") = py::none(), py::arg("max_version") = py::none(),
           py::arg("dl_device") = py::none(), py::arg("copy") = py::none())
      .def("__dlpack_device__",
           [](const Tensor& t) {
             auto d = to_dl_device(t.device());
             return py::make_tuple(d.device_type, d.device_id);
           })
      .def_static("_from_capsule", &tensor_from_capsule)
      .def_static("_from_strings", &strings_from_py, py::arg("values"), py::arg("shape"),
                  "A string tensor from a flat sequence of str/bytes (row-major) and its shape.")
      // Sequence / optional / map values (what ONNX sequence, optional and
      // map inputs and outputs hold; python/twinfer/_engine.py converts
      // lists, None and dicts).
      .def_static("_container",
                  [](const std::string& type, std::vector<Tensor> items) {
                    // type: the container's full type, "sequence(float32)" ...
                    std::vector<DType> t = type_from_str(type);
                    if (!dtype_is_container(t[0]))
                      throw Error(ErrorKind::kDType, "'" + type + "' is not a sequence, optional or map type");
                    return Tensor::container(t[0], std::vector<DType>(t.begin() + 1, t.end()), std::move(items));
                  },
                  py::arg("type"), py::arg("items"))
      .def("_items", [](const Tensor& t) { return t.list().items; },
           "The items of a sequence (an optional: none or one; a map: its keys and its values).")
      .def("_view_as",
           [](const Tensor& t, const std::string& name) {
             // Same memory read as another dtype of the same width: how NumPy
             // arrays of ml_dtypes types (bfloat16, float8_*, int4, float4_e2m1fn
             // ...), which DLPack cannot carry, come in through a uint8/uint16 view.
             DType to = dtype_from_name(name);
             if (to == DType::kString || dtype_size(to) != dtype_size(t.dtype()))
               throw Error(ErrorKind::kDType, std::string("cannot view ") + dtype_name(t.dtype()) + " as " + name);
             if (!t.storage()) return Tensor::empty(to, t.shape(), t.device());
             const size_t off = static_cast<size_t>(static_cast<const char*>(t.data()) -
                                                    static_cast<const char*>(t.storage()->data()));
             return view_of(t, off, to, t.shape());
           },
           py::arg("dtype"))
      .def("_window",
           [](const Tensor& t, int64_t byte_offset, const std::string& name, const Shape& shape) {
             // Another tensor over the same storage (no copy), starting
             // byte_offset bytes after this one: how tests make a device
             // input that is not at the arena's alignment.
             if (dtype_is_container(t.dtype()) || t.dtype() == DType::kString)
               throw Error(ErrorKind::kInvalidArgument,
                           std::string("_window: a ") + dtype_name(t.dtype()) + " tensor holds objects, not bytes");
             if (!t.storage())
               throw Error(ErrorKind::kInvalidArgument, "_window: the tensor has no storage");
             const DType to = dtype_from_name(name);
             if (to == DType::kString)
               throw Error(ErrorKind::kInvalidArgument, "_window: a window cannot be a string tensor");
             if (byte_offset < 0)
               throw Error(ErrorKind::kInvalidArgument,
                           "_window: byte_offset must be >= 0, got " + std::to_string(byte_offset));
             const size_t start = static_cast<size_t>(static_cast<const char*>(t.data()) -
                                                      static_cast<const char*>(t.storage()->data()));
             const size_t total = t.storage()->bytes();
             const size_t avail = start <= total ? total - start : 0;
             if (static_cast<uint64_t>(byte_offset) > avail)
               throw Error(ErrorKind::kShape, "_window: byte_offset " + std::to_string(byte_offset) +
                                                  " is past the end of the storage (" + std::to_string(avail) +
                                                  " bytes from this tensor's start)");
             const size_t off = start + static_cast<size_t>(byte_offset);
             if (off % dtype_size(to) != 0)
               throw Error(ErrorKind::kInvalidArgument,
                           "_window: the window would start " + std::to_string(off) +
                               " bytes into its storage, not a multiple of " + name + "'s size " +
                               std::to_string(dtype_size(to)));
             // Its size, without overflowing: no more than what is left.
             const size_t left = total - off;
             bool empty = false;
             for (int64_t d : shape) {
               if (d < 0) throw Error(ErrorKind::kShape, "_window: negative dimension in shape " + shape_str(shape));
               empty = empty || d == 0;
             }
             size_t bytes = empty ? 0 : dtype_size(to);
             for (int64_t d : shape) {
               if (empty) break;
               if (static_cast<uint64_t>(d) > left / bytes) {
                 bytes = left + 1;  // too big, whatever the rest
                 break;
               }
               bytes *= static_cast<size_t>(d);
             }
             if (bytes > left)
               throw Error(ErrorKind::kShape, "_window: a " + name + " window of shape " + shape_str(shape) +
                                                  " at byte_offset " + std::to_string(byte_offset) +
                                                  " goes past the end of the storage (" + std::to_string(left) +
                                                  " bytes left there)");
             return view_of(t, off, to, shape);
           },
           py::arg("byte_offset"), py::arg("dtype"), py::arg("shape"),
           "A tensor over the same memory (no copy), starting byte_offset bytes after this one's start, of "
           "another dtype and shape that must fit inside the storage; it is ready when this tensor is. For "
           "tests of inputs that are not at the arena's alignment.")
      .def("__repr__", [](const Tensor& t) {
        return "twinfer.Tensor(shape=" + shape_str(t.shape()) + ", dtype=" + t.type_name() +
               ", device=" + t.device().str() + ")";
      });
}

}  // namespace twinfer::bindings
