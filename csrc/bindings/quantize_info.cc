// _core.smoothing_weight_amax: the weight side of SmoothQuant's factors for
// calibration (python/twinfer/quantize/smoothing.py), read from the model as
// the int8 build will see it (constants folded, so a weight behind a
// Transpose counts as the matrix it becomes).
#include <pybind11/stl.h>

#include "bindings/bindings.h"
#include "graph/passes/infer_and_fold.h"
#include "graph/passes/smooth_activations.h"

namespace py = pybind11;

namespace twinfer::bindings {

void bind_quantize_info(py::module_& m) {
  m.def(
      "smoothing_weight_amax",
      [](py::object source, bool is_path, const std::string& base_dir, const std::set<std::string>& keep_float) {
        graph::Model model = read_source(source, is_path, base_dir);
        py::gil_scoped_release nogil;
        passes::PassContext pc;
        pc.opset = model.opset("");
        passes::infer_and_fold(model.graph, pc, true);
        return passes::smoothing_weight_amax(model.graph, keep_float);
      },
      py::arg("source"), py::arg("is_path"), py::arg("base_dir") = "", py::arg("keep_float") = std::set<std::string>{},
      "{activation: per contraction row, the largest |weight| over the MatMul/Gemm layers that read it "
      "(the layers int8 smoothing rescales)}.");
}

}  // namespace twinfer::bindings
