// The _core extension module: private; python/twinfer is the public front.
#include "bindings/bindings.h"

PYBIND11_MODULE(_core, m) {
  m.doc() = "twinfer's C++ core (private; use the twinfer package)";
  twinfer::bindings::bind_errors(m);
  twinfer::bindings::bind_tensor(m);  // first: device bindings take Tensors
  twinfer::bindings::bind_containers(m);
  twinfer::bindings::bind_device(m);
  twinfer::bindings::bind_kernel_math(m);
  twinfer::bindings::bind_engine(m);
  twinfer::bindings::bind_build_info(m);
  twinfer::bindings::bind_quantize_info(m);
  bind_model_info(m);
}
