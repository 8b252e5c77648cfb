// The channel block of a backend's blocked activation layout (the
// com.twinfer.blocked domain, see graph/passes/blocked_layout.h): a blocked
// [N, C, H, W] tensor occupies N * round_up(C, block) * H * W elements.
//
// Only the backend knows the number (the CPU asks oneDNN which ISA it runs:
// 16 with AVX-512, else 8), and the planner needs it to size buffers. Rather
// than have the runtime include a backend header, the backend registers a
// function here at static init (backends/cpu/onednn_common.cc), next to the
// kernels it registers, and the planner asks through this header. The
// function is called lazily, on the first plan, not during registration.
#pragma once
#include <cstdint>

#include "core/backend.h"

namespace twinfer {

using ChannelBlockFn = int64_t (*)();

void register_channel_block(Backend backend, ChannelBlockFn fn);
// 0 when the backend registered none (it has no blocked layout).
int64_t channel_block(Backend backend);

struct ChannelBlockRegistrar {
  ChannelBlockRegistrar(Backend backend, ChannelBlockFn fn) { register_channel_block(backend, fn); }
};

}  // namespace twinfer
