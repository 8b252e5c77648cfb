#include "core/backend.h"

#include "core/error.h"

namespace twinfer {

const char* backend_name(Backend b) { return b == Backend::kCPU ? "cpu" : "cuda"; }

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kFP32: return "fp32";
    case Precision::kTF32: return "tf32";
    case Precision::kFP16: return "fp16";
    case Precision::kBF16: return "bf16";
    case Precision::kINT8: return "int8";
    case Precision::kFP8: return "fp8";
  }
  return "fp32";
}

Precision precision_from_name(const std::string& s) {
  if (s == "fp32" || s == "float32") return Precision::kFP32;
  if (s == "tf32") return Precision::kTF32;
  if (s == "fp16" || s == "float16") return Precision::kFP16;
  if (s == "bf16" || s == "bfloat16") return Precision::kBF16;
  if (s == "int8") return Precision::kINT8;
  if (s == "fp8") return Precision::kFP8;
  throw Error(ErrorKind::kInvalidArgument,
              "unknown precision '" + s + "' (expected fp32, tf32, fp16, bf16, int8 or fp8)");
}

}  // namespace twinfer
