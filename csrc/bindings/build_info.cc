// twinfer.build_info() / cuda_available(): what this build contains and finds.
#include <dnnl.hpp>
#include <omp.h>
#include <pybind11/stl.h>

#include "bindings/bindings.h"
#include "core/device_info.h"
#include "ops/schema.h"

namespace py = pybind11;

namespace twinfer::bindings {

void bind_build_info(py::module_& m) {
  m.def("cuda_available", [] { return cuda_device_count() > 0; });
  m.def("build_info", [] {
    py::dict d;
    const dnnl_version_t* v = dnnl_version();
    d["cuda_compiled"] = cuda_compiled();
    d["cuda_runtime"] = cuda_compiled() ? py::object(py::str(cuda_runtime_version())) : py::object(py::none());
    d["cuda_devices"] = cuda_device_count();
    py::list names;
    for (int i = 0; i < cuda_device_count(); ++i) names.append(cuda_device_name(i));
    d["cuda_device_names"] = names;
    d["cublas"] = py::none();  // set once the cuBLAS backend is linked
    d["cudnn"] = py::none();
    d["cpu_blas"] = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                    std::to_string(v->patch) + std::string(" (") + (v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "threads") + ")";
    d["cpu_threads"] = omp_get_max_threads();
    d["ops"] = registered_op_types();
    return d;
  });
}

}  // namespace twinfer::bindings
