// Bias correction for weight quantization (Nagel et al., "Data-Free
// Quantization", 2019, the empirical-mean variant): rounding a layer's
// weights to int8 shifts its output channel c by
//     sum over the contraction of (w_int8 * scale - w) * E[x],
// which is a systematic error, not noise, wherever the input's mean is not
// zero (after ReLU/ReLU6 it never is). Subtracting that shift from the bias
// removes it. Depthwise layers with a few large weights per channel gain most.
#pragma once
#include <vector>

#include "core/tensor.h"
#include "graph/ir.h"

namespace twinfer::passes {

// The output shift per output channel of node `n` (Conv, Gemm or MatMul)
// caused by replacing float weight `w` with int8 `q` times per-output-channel
// `scales`, for an input whose per-channel mean is `mean` (Conv: per input
// channel; Gemm/MatMul: per element of the contracted axis). Empty when the
// shapes do not fit that contract.
std::vector<float> weight_rounding_shift(const graph::Node& n, const Tensor& w, const Tensor& q,
                                         const Tensor& scales, const std::vector<float>& mean);

// Moves `shift` out of node `i`'s output: into its bias (Conv B, Gemm C, or
// the constant channel vector of a MatMul's sole following Add), adding a
// bias input or an Add node when there is none. Returns false (graph
// unchanged) when the bias has a shape it cannot absorb. New nodes go to `added`.
bool subtract_from_bias(graph::Graph& g, size_t i, const std::vector<float>& shift,
                        const std::vector<std::vector<int>>& users, std::vector<graph::Node>* added);

}  // namespace twinfer::passes
