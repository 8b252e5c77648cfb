// Activation smoothing in the style of SmoothQuant (Xiao et al., 2023): in a
// transformer a few channels of an activation (a LayerNorm output's outlier
// dimensions) run 10-30x larger than the rest in every token, so one int8
// scale for the tensor leaves the other channels a few levels. Dividing
// channel k of x by s[k] and multiplying row k of the weights it meets by
// s[k] computes the same product,
//
//   x W = (x / s) (diag(s) W),
//
// while the range moves from the activation (quantized per tensor) into the
// weights (quantized per output channel, where a large row costs little).
// The factors come from calibration (python/twinfer/quantize/smoothing.py:
// s[k] = max|x_k|^alpha / max|w_k|^(1 - alpha), the weight side from
// smoothing_weight_amax below) and are saved with it; this pass only
// applies them, so every backend quantizes the same smoothed graph.
//
// For each activation x with factors (QuantizeSpec::smoothing), the MatMul /
// Gemm nodes that will be quantized with x as their first input and a
// constant float32 weight get the scaled weight (a new constant), and read
//   - x itself, when x comes from a LayerNormalization whose scale (and bias)
//     are constant vectors over the last axis and nobody else reads x: its
//     scale and bias are divided by s (no extra work at run time);
//   - otherwise a new value x_smoothed = Mul(x, 1 / s); other readers (a
//     residual Add, a layer kept in float) still read x.
// The spec is updated: the smoothed value gets the calibrated range of x / s,
// x's sign, its channel means divided by s (bias correction) and its
// per-token setting. Run before insert_qdq.
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "graph/passes/insert_qdq.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {

// SmoothQuant's weight statistic: for every float32 activation read as
// input 0 by MatMul / Gemm nodes (not in keep_float) with a constant 2-D
// float32 weight (the readers this pass rescales), the largest |w| of each
// contraction row k over all those readers. Calibration
// (twinfer/quantize/smoothing.py) combines it with max |x[..., k]| into the
// factors; activations whose readers disagree on the length are left out.
std::map<std::string, std::vector<float>> smoothing_weight_amax(const graph::Graph& g,
                                                                const std::set<std::string>& keep_float = {});

// Returns the number of activations smoothed.
int smooth_activations(graph::Graph& g, QuantizeSpec& spec, const PassContext& ctx);

}  // namespace twinfer::passes
