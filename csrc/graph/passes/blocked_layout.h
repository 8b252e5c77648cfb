// Keeps convolution activations in oneDNN's channel-blocked layout across
// the graph (plan time, concrete shapes, CPU, float32).
//
// Convolutions compute fastest on nChw16c (AVX-512; nChw8c otherwise):
// channels in blocks of 16 contiguous floats, the channel count padded up to
// a whole block. Reordering from and to plain NCHW around every convolution
// costs about as much as a 1x1 convolution itself, so this pass finds regions
// of ops that can all work on blocked memory and rewrites them into the
// com.twinfer.blocked domain (kBlockedDomain, graph/domains.h):
//
//   Conv, com.twinfer::Conv          -> blocked Conv (weights constant; groups
//                                       depthwise or whole blocks). Its x may
//                                       stay plain when it has fewer channels
//                                       than one block (`plain_input` = 1).
//   Relu, LeakyRelu, Clip, Sigmoid,  -> blocked eltwise (the op's parameters in
//   Tanh, HardSigmoid, HardSwish        `activation` / `activation_params`)
//   Add, Mul (equal shapes, or one   -> blocked binary
//     operand [N|1, C, 1, 1])
//   MaxPool, AveragePool,            -> blocked pooling
//   GlobalAveragePool, GlobalMaxPool
//   Concat (axis 1, block-aligned)   -> blocked concat
//
// A region starts at a convolution; the other ops join when one of their
// inputs is already blocked. A convolution alone in its region keeps its own
// choice of layout (onednn_conv.cc), since explicit reorders on both sides
// would gain nothing. Whether a node can join is asked of the blocked
// kernel's supports(), so the pass and the kernels cannot disagree.
//
// Values keep their logical shapes ([N, C, H, W]); the returned flags say
// which are stored blocked, and the planner sizes those with the padded
// channel count. ToBlocked / FromBlocked nodes are inserted where a region
// meets a plain producer or consumer; graph outputs are always plain.
#pragma once
#include <cstdint>
#include <vector>

#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {

struct BlockedLayout {
  int64_t block = 0;          // channel block (0: the pass changed nothing)
  std::vector<char> blocked;  // by value id: 1 when the value is stored blocked
  int nodes = 0;              // nodes moved into the blocked domain
  int reorders = 0;           // ToBlocked + FromBlocked nodes added
};

// `block`: the backend's channel block (ops/channel_block.h). Off when the
// environment says TWINFER_BLOCKED_LAYOUT=0 as the plan is built (for
// measuring the difference; not a production switch).
BlockedLayout blocked_layout(graph::Graph& g, const PassContext& ctx, int64_t block);

}  // namespace twinfer::passes
