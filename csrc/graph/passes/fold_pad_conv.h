// Zero padding in front of a convolution becomes the convolution's own pads:
//   Pad(x, spatial pads, mode constant, value 0) -> Conv
// reads x with Conv.pads increased by the Pad's. Models converted from
// TensorFlow (EfficientNet-Lite's "same" padding, ...) pad explicitly; the
// separate Pad cost a pass over the activation and, on the CPU, a reorder out
// of and back into oneDNN's blocked layout around it (EfficientNet-Lite0 at
// batch 8: 18 of 42 ms).
//
// Conditions: the pads are constant, non-negative and only on spatial dims;
// the fill is absent or a constant 0; every reader of the padded value is a
// Conv reading it as input X with auto_pad NOTSET; the padded value is not a
// graph output. On int8 (an imported QDQ model, after graph/passes/int8_movement.cc
// moved the Pad onto the integers): the readers are com.twinfer::QConv and the
// fill is their x zero point, which oneDNN's int8 convolution pads with.
#pragma once
#include <map>
#include <string>

#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {

// Returns the number of Pad nodes folded. `renamed` receives, per folded Pad,
// its output's name -> its input's name (the value the Convs now read), so that
// per-value settings keyed by the old name (int8 calibration ranges) can follow.
int fold_pad_into_conv(graph::Graph& g, const PassContext& ctx, std::map<std::string, std::string>* renamed);

}  // namespace twinfer::passes
