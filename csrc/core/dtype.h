// Element types twinfer tensors can hold, with their sizes, names and the
// ONNX / DLPack codes they map to. No CUDA headers here: backends include this.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace twinfer {

enum class DType : uint8_t {
  kFloat32,
  kFloat16,
  kBFloat16,
  kFloat64,
  kInt8,
  kUInt8,
  kInt16,
  kUInt16,
  kInt32,
  kUInt32,
  kInt64,
  kUInt64,
  kBool,
  // 8-bit floats (ONNX FLOAT8*): storage and Cast/Quantize only, no arithmetic.
  kFloat8E4M3FN,
  kFloat8E4M3FNUZ,
  kFloat8E5M2,
  kFloat8E5M2FNUZ,
  kFloat8E8M0,
  kString,  // only for constants/attributes; no kernel computes on it
  kUndefined,
};

size_t dtype_size(DType t);
const char* dtype_name(DType t);          // "float32", "int64", ...
bool dtype_is_float(DType t);             // f16/bf16/f32/f64 (not the 8-bit floats)
bool dtype_is_float8(DType t);            // the five FLOAT8 types
bool dtype_is_integer(DType t);           // signed or unsigned ints (not bool)
bool dtype_is_signed(DType t);

// ONNX TensorProto.DataType <-> DType. Unknown codes give kUndefined.
DType dtype_from_onnx(int32_t onnx_code);
int32_t dtype_to_onnx(DType t);

// Parse a name as accepted from Python ("float32", "float16", "int64", "bool" ...;
// the 8-bit floats by their ml_dtypes names, "float8_e4m3fn" ...).
DType dtype_from_name(const std::string& name);

}  // namespace twinfer
