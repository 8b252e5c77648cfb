// Where a graph runs and in what precision: the two facts every layer above
// core (passes, kernels, the engine, the bindings) names.
#pragma once
#include <string>

namespace twinfer {

enum class Backend { kCPU, kCUDA };
const char* backend_name(Backend b);

enum class Precision { kFP32, kTF32, kFP16, kBF16, kINT8, kFP8 };
const char* precision_name(Precision p);
Precision precision_from_name(const std::string& s);

}  // namespace twinfer
