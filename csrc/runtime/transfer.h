// Moving whole tensors between the host and a device, outside a plan: what
// Tensor.numpy() of a device tensor, constant uploads and the eager
// fallback of a device engine use. Each device has one transfer stream.
#pragma once
#include <memory>

#include "core/device_api.h"
#include "core/tensor.h"

namespace twinfer {

// The device's stream for these copies (created on first use).
std::shared_ptr<Stream> transfer_stream(Device d);

// A host copy of `t` (returned as is when it is on the host): waits for
// t's ready event, then copies. Synchronous.
Tensor to_host(const Tensor& t);

// A copy of host tensor `t` on device `d`, uploaded synchronously (weights,
// constants): ready when this returns.
Tensor to_device(const Tensor& t, Device d);

}  // namespace twinfer
