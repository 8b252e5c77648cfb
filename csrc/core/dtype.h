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
  kString,  // only for constants/attributes; no kernel computes on it
  kUndefined,
};

size_t dtype_size(DType t);
const char* dtype_name(DType t);          // "float32", "int64", ...
bool dtype_is_float(DType t);             // f16/bf16/f32/f64
bool dtype_is_integer(DType t);           // signed or unsigned ints (not bool)
bool dtype_is_signed(DType t);

// ONNX TensorProto.DataType <-> DType. Unknown codes give kUndefined.
DType dtype_from_onnx(int32_t onnx_code);
int32_t dtype_to_onnx(DType t);

// Parse a name as accepted from Python ("float32", "float16", "int64", "bool" ...).
DType dtype_from_name(const std::string& name);

}  // namespace twinfer
