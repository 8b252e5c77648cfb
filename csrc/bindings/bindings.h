// pybind11 glue only: each file binds one concern; module.cc calls them all.
#pragma once
#include <pybind11/pybind11.h>

namespace twinfer::bindings {

void bind_errors(pybind11::module_& m);
void bind_tensor(pybind11::module_& m);
void bind_engine(pybind11::module_& m);
void bind_build_info(pybind11::module_& m);

}  // namespace twinfer::bindings

// The ONNX reader's model summary (csrc/bindings/model_info.cc).
void bind_model_info(pybind11::module_& m);
