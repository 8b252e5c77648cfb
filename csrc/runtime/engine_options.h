// How an engine is built: device, precision, passes, int8 calibration, and
// the device runtime's choices (fallback, graphs, stream priority).
#pragma once
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "core/device.h"
#include "runtime/placement.h"

namespace twinfer {

struct EngineOptions {
  Device device = Device::cpu();
  Precision precision = Precision::kFP32;
  int num_threads = 0;            // CPU threads per run; 0 = all the process may use
  bool optimize = true;           // run the rewrite passes (folding, fusion)
  size_t max_cached_plans = 16;   // per-shape plans kept (least recently used dropped)
  bool plan_ahead = true;         // build the plan for the next shapes of a progression ahead (runtime/plan_ahead.h)
  // Initializers that the model also lists as inputs and that runs may feed:
  // they become inputs (after the model's own), their values the defaults a
  // run without them uses; not folded. The rest stay constants.
  std::vector<std::string> override_initializers;
  bool override_all_initializers = false;
  // Intermediate values to return as extra outputs, after the model's own
  // (calibration and per-layer accuracy reports read activations this way).
  std::vector<std::string> extra_outputs;
  // precision int8: calibrated activation ranges (value name -> amax), and
  // nodes to keep in float (the accuracy fallback). Activations in
  // int8_unsigned were never negative in calibration: they run as uint8.
  std::map<std::string, float> int8_amax;
  std::set<std::string> int8_unsigned;
  // Per-channel activation means for bias correction (QuantizeSpec).
  std::map<std::string, std::vector<float>> int8_channel_mean;
  std::set<std::string> keep_float;
  // SmoothQuant per activation: (factors, calibrated amax of x / factors)
  // (graph/passes/smooth_activations.h), and the activations quantized per
  // token at run time (ops/quant/token_quant.h).
  std::map<std::string, std::pair<std::vector<float>, float>> int8_smoothing;
  std::set<std::string> int8_per_token;
  // weights="int8": MatMul/Gemm constant weights stored int8 per output
  // channel and dequantized inside the GEMM (activations stay float32).
  bool int8_weights = false;

  // Device engines (cuda, sim).
  bool allow_cpu_fallback = true;  // nodes without a device kernel run on the CPU (else: error at load)
  bool cuda_graphs = true;         // replay a captured graph per input shapes after the first run
  int stream_priority = 0;         // priority of the contexts' own streams (lower: more urgent)
  SimCoverage sim_coverage = SimCoverage::kAll;  // device "sim": which nodes it takes (runtime/placement.h)
};

}  // namespace twinfer
