#include "runtime/transfer.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "core/error.h"

namespace twinfer {

std::shared_ptr<Stream> transfer_stream(Device d) {
  static std::mutex m;
  static auto* streams = new std::map<std::pair<int, int>, std::shared_ptr<Stream>>();  // never destroyed
  std::lock_guard<std::mutex> lock(m);
  auto& s = (*streams)[{static_cast<int>(d.type), d.index}];
  if (!s) s = device_api(d).create_stream(0);
  return s;
}

Tensor to_host(const Tensor& t) {
  if (dtype_is_container(t.dtype())) {
    // A sequence or optional of device arrays (the host evaluator runs those
    // models): its items come to the host, each after its own run.
    const TensorList& l = t.list();
    if (std::none_of(l.items.begin(), l.items.end(), [](const Tensor& i) { return i.device().is_accelerator(); }))
      return t;
    std::vector<Tensor> items;
    items.reserve(l.items.size());
    for (const Tensor& i : l.items) items.push_back(to_host(i));
    return Tensor::container(t.dtype(), l.elem_type, std::move(items));
  }
  if (!t.device().is_accelerator()) return t;
  if (t.ready_event()) host_wait(*t.ready_event());
  Tensor h = Tensor::empty(t.dtype(), t.shape(), Device::cpu());
  // Into pageable memory the copy returns once it is done (and, on the
  // simulated device, the host is then ordered after it).
  transfer_stream(t.device())->copy(h.data(), t.data(), t.bytes());
  // The run that wrote it may have found an index out of range: raised here,
  // from that run's own flag (never another context's, whose run may still
  // be in flight and whose owner must see its own error).
  if (t.error_flag()) device_api(t.device()).check_kernel_errors(t.error_flag().get());
  return h;
}

Tensor to_device(const Tensor& t, Device d) {
  if (t.device() == d) return t;
  if (t.dtype() == DType::kString || dtype_is_container(t.dtype()))
    throw Error(ErrorKind::kDevice, std::string(dtype_name(t.dtype())) + " values stay on the host; they cannot go to " +
                                        d.str());
  if (t.device().is_accelerator())
    throw Error(ErrorKind::kDevice, "copy from " + t.device().str() + " to " + d.str() + " is not supported");
  Tensor out = Tensor::empty(t.dtype(), t.shape(), d);
  auto s = transfer_stream(d);
  s->copy(out.data(), t.data(), t.bytes());
  s->synchronize();
  return out;
}

}  // namespace twinfer
