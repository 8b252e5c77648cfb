// _core.read_model_info: what the ONNX reader makes of a model (inputs,
// outputs, opsets, nodes, how many weight bytes were mapped vs copied),
// without compiling it. Errors propagate as twinfer::Error (translated in errors.cc).
#include <pybind11/stl.h>

#include "bindings/bindings.h"
#include "onnx/reader.h"

namespace py = pybind11;

namespace {

using namespace twinfer;

py::object shape_to_py(const graph::Value& v) {
  if (!v.has_shape) return py::none();
  py::list l;
  for (const auto& d : v.shape) {
    if (d.known()) l.append(d.value);
    else if (!d.symbol.empty()) l.append(d.symbol);
    else l.append(py::none());
  }
  return std::move(l);
}

py::list values_to_py(const graph::Graph& g, const std::vector<int>& ids) {
  py::list l;
  for (int id : ids) {
    const graph::Value& v = g.values[id];
    py::dict d;
    d["name"] = v.name;
    d["dtype"] = dtype_name(v.dtype);
    d["shape"] = shape_to_py(v);
    l.append(d);
  }
  return l;
}

py::dict model_to_py(const graph::Model& m) {
  const graph::Graph& g = m.graph;
  py::dict d;
  d["ir_version"] = m.ir_version;
  d["producer_name"] = m.producer_name;
  py::dict opsets;
  for (const auto& [domain, version] : m.opsets) opsets[py::str(domain)] = version;
  d["opsets"] = opsets;
  d["inputs"] = values_to_py(g, g.inputs);
  d["outputs"] = values_to_py(g, g.outputs);
  size_t count = 0, bytes = 0;
  for (const auto& v : g.values)
    if (v.is_constant()) {
      ++count;
      bytes += v.constant.bytes();
    }
  d["initializers"] = count;
  d["weight_bytes"] = bytes;
  d["weight_bytes_mapped"] = m.weight_bytes_mapped;
  d["weight_bytes_copied"] = m.weight_bytes_copied;
  py::list nodes;
  py::list node_io;  // per node: ([(input name, is constant)], [output names])
  for (const auto& n : g.nodes) {
    nodes.append(py::make_tuple(n.name, n.op_type, n.domain));
    py::list ins, outs;
    for (int v : n.inputs)
      ins.append(py::make_tuple(v < 0 ? std::string() : g.values[v].name, v >= 0 && g.values[v].is_constant()));
    for (int v : n.outputs) outs.append(v < 0 ? std::string() : g.values[v].name);
    node_io.append(py::make_tuple(ins, outs));
  }
  d["nodes"] = nodes;
  d["node_io"] = node_io;
  return d;
}

}  // namespace

namespace twinfer::bindings {

graph::Model read_source(py::object source, bool is_path, const std::string& base_dir) {
  if (is_path) {
    const std::string path = source.cast<std::string>();
    py::gil_scoped_release nogil;
    return onnx::read_model_file(path);
  }
  // Borrow the bytes object's buffer: `source` holds it for the whole
  // call, longer than the model lives, so the keep-alive need not own it.
  py::bytes b = source.cast<py::bytes>();
  char* data = nullptr;
  py::ssize_t size = 0;
  if (PyBytes_AsStringAndSize(b.ptr(), &data, &size) != 0) throw py::error_already_set();
  std::shared_ptr<void> unowned(static_cast<void*>(data), [](void*) {});
  py::gil_scoped_release nogil;
  return onnx::read_model_bytes(data, static_cast<size_t>(size), unowned, base_dir);
}

}  // namespace twinfer::bindings

void bind_model_info(py::module_& m) {
  m.def(
      "read_model_info",
      [](py::object source, bool is_path, const std::string& base_dir) {
        return model_to_py(twinfer::bindings::read_source(source, is_path, base_dir));
      },
      py::arg("source"), py::arg("is_path"), py::arg("base_dir") = "",
      "Parse an ONNX model (a path, or bytes) and summarise it as a dict; nothing is compiled.");
}
