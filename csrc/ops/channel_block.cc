#include "ops/channel_block.h"

namespace twinfer {

namespace {
// Zero-initialised before any dynamic initialiser runs, so registrations from
// other files' static initialisers land safely whatever their order.
ChannelBlockFn g_fns[2] = {nullptr, nullptr};
}  // namespace

void register_channel_block(Backend backend, ChannelBlockFn fn) { g_fns[static_cast<int>(backend)] = fn; }

int64_t channel_block(Backend backend) {
  const ChannelBlockFn fn = g_fns[static_cast<int>(backend)];
  return fn ? fn() : 0;
}

}  // namespace twinfer
