// twinfer::Error -> the Python classes of twinfer.errors, with .node and .op set.
#include <stdexcept>
#include <string>

#include "bindings/bindings.h"
#include "core/error.h"

namespace py = pybind11;

namespace twinfer::bindings {

static const char* class_for(ErrorKind k) {
  switch (k) {
    case ErrorKind::kModelFormat: return "ModelFormatError";
    case ErrorKind::kUnsupportedOp: return "UnsupportedOpError";
    case ErrorKind::kShape: return "ShapeError";
    case ErrorKind::kDType: return "DTypeError";
    case ErrorKind::kDevice: return "DeviceError";
    case ErrorKind::kOutOfMemory: return "OutOfMemoryError";
    case ErrorKind::kInvalidArgument: return "InvalidArgumentError";
    case ErrorKind::kRuntime: return "Error";
  }
  return "Error";
}

// Messages quote names and attribute values from model files, which need
// not be UTF-8: undecodable bytes become U+FFFD instead of a UnicodeDecodeError.
static py::object text(const std::string& s) {
  return py::reinterpret_steal<py::object>(PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace"));
}

void bind_errors(py::module_& m) {
  (void)m;
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      py::gil_scoped_acquire gil;
      py::object errors = py::module_::import("twinfer.errors");
      py::object cls = errors.attr(class_for(e.kind()));
      py::object exc = cls(text(e.what()));
      exc.attr("node") = e.node().empty() ? py::object(py::none()) : text(e.node());
      exc.attr("op") = e.op().empty() ? py::object(py::none()) : text(e.op());
      PyErr_SetObject(cls.ptr(), exc.ptr());
    } catch (const std::bad_alloc&) {
      py::object errors = py::module_::import("twinfer.errors");
      PyErr_SetString(errors.attr("OutOfMemoryError").ptr(), "out of host memory");
    } catch (const std::length_error& e) {
      // A container asked for more elements than can exist: a size computed
      // from absurd dims (a corrupt saved engine, an attribute out of range).
      py::object errors = py::module_::import("twinfer.errors");
      PyErr_SetString(errors.attr("OutOfMemoryError").ptr(),
                      (std::string("a size too large to allocate (") + e.what() + ")").c_str());
    }
  });
}

}  // namespace twinfer::bindings
