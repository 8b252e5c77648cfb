// pybind11 glue only: each file binds one concern; module.cc calls them all.
#pragma once
#include <pybind11/pybind11.h>

#include <string>

#include "core/device.h"
#include "graph/ir.h"

namespace twinfer::bindings {

// "cpu", "cuda", "cuda:N", "sim", "sim:N" (raises InvalidArgumentError otherwise).
Device parse_device(const std::string& s);

void bind_errors(pybind11::module_& m);
void bind_tensor(pybind11::module_& m);
void bind_containers(pybind11::module_& m);  // maps as dicts
// A run's output as Engine.run returns it: a Tensor, or for a sequence,
// optional or map the list, None or dict (a sequence of maps converted here).
pybind11::object output_to_py(Tensor t);
void bind_engine(pybind11::module_& m);
void bind_build_info(pybind11::module_& m);
void bind_device(pybind11::module_& m);
void bind_kernel_math(pybind11::module_& m);  // private _test_* helpers
void bind_quantize_info(pybind11::module_& m);

// An ONNX model from a path (is_path) or a bytes object (model_info.cc).
graph::Model read_source(pybind11::object source, bool is_path, const std::string& base_dir);

}  // namespace twinfer::bindings

// The ONNX reader's model summary (csrc/bindings/model_info.cc).
void bind_model_info(pybind11::module_& m);
