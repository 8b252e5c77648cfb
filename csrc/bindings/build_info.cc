// twinfer.build_info() / cuda_available(): what this build contains and finds.
#include <dnnl.hpp>
#include <omp.h>
#include <pybind11/stl.h>

#include "bindings/bindings.h"
#include "core/device_info.h"
#include "ops/kernel.h"
#include "ops/schema.h"

namespace py = pybind11;

namespace twinfer::bindings {

void bind_build_info(py::module_& m) {
  m.def("cuda_available", [] { return cuda_device_count() > 0; });
  m.def("build_info_cuda_compiled", &cuda_compiled, "Whether this build has the CUDA backend (no driver call).");
  m.def("cuda_symbol_problems", &cuda_symbol_problems,
        "Resolve every cuBLASLt / cuDNN entry point the CUDA kernels use (no GPU needed): problems found.");
  m.def("set_cuda_library_path", &set_cuda_library_path, py::arg("name"), py::arg("path"),
        "Where cuBLASLt / cuDNN are (twinfer/_libs.py finds NVIDIA's wheels); opened on first use.");
  m.def("_test_cudnn_sdpa_validate", &cudnn_sdpa_validate, py::arg("dims"), py::arg("dtype"), py::arg("causal"),
        py::arg("bias_dims"), py::arg("sm_version"), py::arg("strides") = std::vector<int64_t>{},
        "cuDNN frontend's checks of a fused-attention graph for a GPU of sm_version, run without one: '' or why.");
  m.def("_test_cudnn_conv_validate", &cudnn_conv_validate, py::arg("x"), py::arg("w"), py::arg("y"), py::arg("pads"),
        py::arg("strides"), py::arg("dilations"), py::arg("dtype"),
        "cuDNN frontend's checks of a convolution graph, run without a GPU: '' or why.");
  m.def("build_info", [] {
    py::dict d;
    const dnnl_version_t* v = dnnl_version();
    d["cuda_compiled"] = cuda_compiled();
    d["cuda_runtime"] = cuda_compiled() ? py::object(py::str(cuda_runtime_version())) : py::object(py::none());
    d["cuda_devices"] = cuda_device_count();
    py::list names;
    for (int i = 0; i < cuda_device_count(); ++i) names.append(cuda_device_name(i));
    d["cuda_device_names"] = names;
    // Opened on first use from NVIDIA's wheels (never linked); None with the
    // reason in cuda_libraries when a library is missing.
    py::dict why;
    for (const char* lib : {"cublasLt", "cudnn"}) {
      std::string reason;
      const std::string v = cuda_compiled() ? cuda_library_version(lib, &reason) : "";
      d[lib == std::string("cublasLt") ? "cublaslt" : "cudnn"] = v.empty() ? py::object(py::none()) : py::object(py::str(v));
      if (v.empty()) why[lib] = cuda_compiled() ? reason : "built without the CUDA backend";
    }
    d["cuda_libraries"] = why;
    const std::string fe = cudnn_frontend_version();
    d["cudnn_frontend"] = fe.empty() ? py::object(py::none()) : py::object(py::str(fe));
    d["cutlass_gemm"] = cutlass_gemm_kernels();  // [] without CUTLASS's headers at build
    d["cuda_ops"] = ops_with_kernels(Backend::kCUDA);
    d["cpu_blas"] = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                    std::to_string(v->patch) + std::string(" (") + (v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "threads") + ")";
    d["cpu_threads"] = omp_get_max_threads();
    d["ops"] = registered_op_types();
    return d;
  });
}

}  // namespace twinfer::bindings
