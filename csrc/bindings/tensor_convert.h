// Conversions the other binding files share.
#pragma once
#include <pybind11/pybind11.h>

#include <vector>

#include "core/tensor.h"

namespace twinfer::bindings {
Tensor tensor_from_capsule(pybind11::capsule cap);  // consumes a DLPack capsule, zero-copy when compact
pybind11::object tensor_to_numpy(const Tensor& t);  // zero-copy view
// Engine.run's fast path (feeds.cc): a twinfer.Tensor, or an exact NumPy
// array that is compact and of a dtype DLPack carries, as a tensor sharing
// its memory; false for anything else (python/twinfer/_convert.py takes it).
bool fast_tensor(pybind11::handle x, Tensor* out);
// feeds (a dict) in the order of `names` (a tuple of str) through
// fast_tensor; false when a name is missing or unknown or a value is refused.
bool fast_feeds(pybind11::handle feeds, pybind11::handle names, std::vector<Tensor>* out);
}  // namespace twinfer::bindings
