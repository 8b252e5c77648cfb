// Maps (ZipMap's rows, a sequence of them) as Python dicts, built here in
// one call: converting each map's keys and values through NumPy in Python
// cost about 4 us a row, more than a forest of 300 trees took to score it.
#include <pybind11/pybind11.h>

#include <string>

#include "bindings/bindings.h"
#include "core/tensor.h"

namespace py = pybind11;

namespace twinfer::bindings {

namespace {

bool scalar_type(DType t) {
  switch (t) {
    case DType::kFloat32: case DType::kFloat64: case DType::kInt8: case DType::kInt16: case DType::kInt32:
    case DType::kInt64: case DType::kUInt8: case DType::kUInt16: case DType::kUInt32: case DType::kUInt64:
    case DType::kBool: case DType::kString:
      return true;
    default:
      return false;
  }
}

// Element i of a host tensor of a scalar_type, as a Python scalar.
py::object scalar_at(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kFloat32: return py::float_(t.data_as<const float>()[i]);
    case DType::kFloat64: return py::float_(t.data_as<const double>()[i]);
    case DType::kInt8: return py::int_(t.data_as<const int8_t>()[i]);
    case DType::kInt16: return py::int_(t.data_as<const int16_t>()[i]);
    case DType::kInt32: return py::int_(t.data_as<const int32_t>()[i]);
    case DType::kInt64: return py::int_(t.data_as<const int64_t>()[i]);
    case DType::kUInt8: return py::int_(t.data_as<const uint8_t>()[i]);
    case DType::kUInt16: return py::int_(t.data_as<const uint16_t>()[i]);
    case DType::kUInt32: return py::int_(t.data_as<const uint32_t>()[i]);
    case DType::kUInt64: return py::int_(t.data_as<const uint64_t>()[i]);
    case DType::kBool: return py::bool_(t.data_as<const bool>()[i]);
    case DType::kString: return py::str(t.data_as<const std::string>()[i]);
    default: break;
  }
  throw py::type_error(std::string("no Python scalar for ") + dtype_name(t.dtype()));
}

// A map's dict, or None where its keys or values are not host scalars
// (the caller converts those through NumPy).
py::object map_as_dict(const Tensor& m) {
  if (m.dtype() != DType::kMap) throw py::type_error("not a map: " + m.type_name());
  const std::vector<Tensor>& kv = m.list().items;
  if (kv.size() != 2) return py::none();
  const Tensor& keys = kv[0];
  const Tensor& values = kv[1];
  if (!keys.device().is_cpu() || !values.device().is_cpu() || !scalar_type(keys.dtype()) ||
      !scalar_type(values.dtype()) || keys.numel() != values.numel())
    return py::none();
  py::dict d;
  for (int64_t i = 0; i < keys.numel(); ++i) d[scalar_at(keys, i)] = scalar_at(values, i);
  return d;
}

// A sequence of maps as a list of dicts, or None where a map is not of host
// scalars.
py::object maps_as_dicts(const Tensor& seq) {
  if (seq.dtype() != DType::kSequence) throw py::type_error("not a sequence: " + seq.type_name());
  py::list out;
  for (const Tensor& item : seq.list().items) {
    if (item.dtype() != DType::kMap) return py::none();
    py::object d = map_as_dict(item);
    if (d.is_none()) return py::none();
    out.append(std::move(d));
  }
  return std::move(out);
}

}  // namespace

py::object output_to_py(Tensor t) {
  if (t.dtype() == DType::kSequence && !t.list().items.empty()) {
    py::object dicts = maps_as_dicts(t);
    if (!dicts.is_none()) return dicts;
  }
  if (dtype_is_container(t.dtype()))  // lists, None, dicts as Engine.run gives them
    return py::module_::import("twinfer._engine").attr("_from_value")(std::move(t));
  return py::cast(std::move(t));
}

void bind_containers(py::module_& m) {
  m.def("_map_as_dict", &map_as_dict, py::arg("map"),
        "A map tensor as a dict of Python scalars; None where its types need NumPy.");
  m.def("_maps_as_dicts", &maps_as_dicts, py::arg("sequence"),
        "A sequence of maps as a list of dicts; None where a map's types need NumPy.");
}

}  // namespace twinfer::bindings
