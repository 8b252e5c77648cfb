// INT8 post-training quantization, the graph side: with calibrated ranges
// for activations, every quantizable op (Conv, ConvTranspose, Gemm, MatMul)
// reads its activation inputs through QuantizeLinear -> DequantizeLinear
// (symmetric int8, scale = amax / 127, zero point 0; uint8 with scale
// amax / 255 for activations never seen negative, such as ReLU outputs, which
// would otherwise waste half of int8's levels) and its constant weights
// as int8 per-output-channel initializers behind a DequantizeLinear.
// An activation in `per_token` is read through com.twinfer::TokenQDQ instead
// (ops/quant/token_qdq.h: each row quantized with its own scale when it runs)
// by the MatMul/Gemm layers that take it as their first input.
// The result is a QDQ graph like the ones other quantization tools export;
// the QDQ fusion then maps those patterns onto int8 kernels, and anything it
// does not map still computes exactly what int8 would (quantize, dequantize).
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "graph/passes/pass_context.h"

namespace twinfer::passes {

// SmoothQuant's migration for one activation (graph/passes/smooth_activations.h):
// x / factors[k] is what gets quantized, and the weights it multiplies take
// factors[k] in their row k; `amax` is the calibrated range of x / factors.
struct Smoothing {
  std::vector<float> factors;
  float amax = 0.f;
};

struct QuantizeSpec {
  std::map<std::string, float> activation_amax;  // value name -> calibrated |x| range
  std::set<std::string> unsigned_activations;     // values calibrated >= 0: uint8, zero point 0
  // Per-channel means of activations (Conv inputs: per channel, axis 1;
  // Gemm/MatMul inputs: per element of the last axis). With one, the layer
  // reading it gets its weights' rounding shift taken out of its bias
  // (graph/passes/bias_correction.h).
  std::map<std::string, std::vector<float>> activation_channel_mean;
  // Node names left in float (the accuracy fallback). Engine::create names a
  // node without a name by its first output first, as analyze() reports it.
  std::set<std::string> keep_float;
  std::map<std::string, Smoothing> smoothing;      // activations smoothed before quantizing
  std::set<std::string> per_token;                 // activations quantized per token, at run time
};

// Returns the number of nodes quantized.
int insert_qdq(graph::Graph& g, const QuantizeSpec& spec, const PassContext& ctx);

}  // namespace twinfer::passes
