// Conversions the other binding files share.
#pragma once
#include <pybind11/pybind11.h>

#include "core/tensor.h"

namespace twinfer::bindings {
Tensor tensor_from_capsule(pybind11::capsule cap);  // consumes a DLPack capsule, zero-copy when compact
pybind11::object tensor_to_numpy(const Tensor& t);  // zero-copy view
}  // namespace twinfer::bindings
