// What the planner needs to know about the CPU backend's blocked activation
// layout, without pulling in oneDNN's headers: the channel block (16 on
// AVX-512, 8 otherwise). A blocked [N, C, H, W] tensor occupies
// N * round_up(C, block) * H * W elements (see graph/passes/blocked_layout.h).
#pragma once
#include <cstdint>

namespace twinfer::cpu {

int64_t channel_block();

}  // namespace twinfer::cpu
