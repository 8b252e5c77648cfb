// Device plans of convolution networks compute channels-last (plan time,
// concrete shapes, after lower_precision, before placement).
//
// cuDNN's tensor-core convolutions (float16, bfloat16, TF32) run on NHWC:
// given NCHW they transpose inside or pick slower kernels. This pass finds
// regions of ops that can all work on [N, H, W, C] activations and rewrites
// them so that their values *are* NHWC tensors (logical shapes permuted, not
// only the bytes), with a Transpose where a region meets the rest of the
// graph. Because the shapes are real, everything but the convolution and
// the windowed pools runs on the ordinary kernels:
//
//   Conv, com.twinfer::Conv      -> com.twinfer.nhwc::Conv; its constant
//                                   weights become a new constant, permuted
//                                   once to KRSC [M, kh, kw, C/group] (the
//                                   filter layout cuDNN's NHWC engines read:
//                                   no kernel keeps a copy of its own)
//   MaxPool, AveragePool         -> com.twinfer.nhwc::MaxPool / AveragePool
//   GlobalAveragePool / MaxPool  -> ReduceMean / ReduceMax over axes [1, 2],
//                                   keepdims (the [N, 1, 1, C] result has the
//                                   bytes of the [N, C, 1, 1] one)
//   unary elementwise ops        -> unchanged (layout does not matter)
//   binary elementwise ops       -> unchanged; an operand from outside is
//                                   transposed too ([N, C, 1, 1] scales become
//                                   [N, 1, 1, C]: SE blocks broadcast as before),
//                                   a constant of lower rank is permuted here
//   Concat over channels         -> Concat over axis 3
//
// A region starts at a convolution that the device (and, for a host
// fallback, the CPU) can run channels-last; other ops join when one of their
// inputs is in a region. A region that is one convolution alone would only
// add two transposes: it stays NCHW (unless TWINFER_CHANNELS_LAST=all). Graph outputs are always NCHW.
// Only rank-4 activations are rewritten.
#pragma once
#include <functional>

#include "graph/ir.h"
#include "graph/passes/pass_context.h"
#include "ops/nn/channels_last.h"

namespace twinfer::passes {

struct ChannelsLastOptions {
  // Whether `node` (a com.twinfer.nhwc op, or a Reduce/Concat on NHWC shapes)
  // has kernels, asked of a one-node graph whose values have the shapes the
  // rewrite gives them.
  NodeSupport supports;
  // A new [N, H, W, C] copy of a rank-4 constant [N, C, H, W] (a
  // convolution's weights: KRSC). Every input shape's plan runs this pass;
  // given the engine's ConstantStore::channels_last they share one copy, and
  // the device one upload (the default makes a copy per plan).
  std::function<Tensor(const Tensor&)> to_channels_last = nn::to_channels_last;
};

// Whether device plans at this precision compute convolutions channels-last:
// tf32, fp16, bf16 and fp8 (whose convolutions run in fp16), not exact fp32.
// TWINFER_CHANNELS_LAST=0 turns it off, =1 on for fp32 too, =all also for a
// convolution alone; read each time a plan is built (for measuring both
// layouts and testing; not a production switch).
bool channels_last_wanted(Precision p);

// Returns the number of nodes rewritten (0: the graph is unchanged).
int channels_last(graph::Graph& g, const ChannelsLastOptions& o, const PassContext& ctx);

}  // namespace twinfer::passes
