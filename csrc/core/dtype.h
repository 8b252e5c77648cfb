// Element types twinfer tensors can hold, with their sizes, names and the
// ONNX / DLPack codes they map to. No CUDA headers here: backends include this.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

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
  // 4-bit and 2-bit types (ONNX INT4, UINT4, FLOAT4E2M1, INT2, UINT2). ONNX
  // packs them two or four to a byte; twinfer holds them UNPACKED, one byte
  // per element with the value's bits in the low bits and zeros above, the
  // layout ml_dtypes uses (so NumPy arrays pass without repacking). Only the
  // ONNX reader unpacks. Storage, Cast and Quantize only, no arithmetic.
  kInt4,
  kUInt4,
  kFloat4E2M1,
  kInt2,
  kUInt2,
  // ONNX strings: host arrays of std::string (see core/tensor.h), met only in
  // eagerly evaluated graphs; only kernels registered for strings see them.
  kString,
  // ONNX sequence and optional values: not arrays but host objects (a
  // TensorList, see core/tensor.h), met only in eagerly evaluated graphs.
  kSequence,
  kOptional,
  kUndefined,
  // An ONNX map (ai.onnx.ml: ZipMap's output, a sequence of them): a
  // host object like a sequence, holding two 1-D tensors, keys and values.
  // Last, so that the codes saved engine files hold stay what they were.
  kMap,
};

size_t dtype_size(DType t);
const char* dtype_name(DType t);          // "float32", "int64", ...
bool dtype_is_float(DType t);             // f16/bf16/f32/f64 (not the 8-bit floats)
bool dtype_is_float8(DType t);            // the five FLOAT8 types
bool dtype_is_subbyte(DType t);           // the five 4-bit / 2-bit types
int dtype_bits(DType t);                  // bits of one value: 4 or 2 for those, else 8 * size
bool dtype_is_integer(DType t);           // signed or unsigned ints (not bool, not the sub-byte ints)
bool dtype_is_signed(DType t);

// ONNX TensorProto.DataType <-> DType. Unknown codes give kUndefined.
DType dtype_from_onnx(int32_t onnx_code);
int32_t dtype_to_onnx(DType t);

// Parse a name as accepted from Python ("float32", "float16", "int64", "bool" ...;
// the 8-bit floats and the sub-byte types by their ml_dtypes names,
// "float8_e4m3fn", "int4", "float4_e2m1fn" ...).
DType dtype_from_name(const std::string& name);

// Sequence, optional and map types. A full type is written outermost first:
// optional(sequence(float32)) is {kOptional, kSequence, kFloat32}; a map
// lists its key type, then its value's full type: sequence(map(int64,
// float32)) is {kSequence, kMap, kInt64, kFloat32}.
bool dtype_is_container(DType t);  // kSequence, kOptional or kMap
// "float32", "sequence(float32)", "optional(sequence(int64))",
// "map(string,float32)" for {outer} + inner.
std::string type_str(DType outer, const std::vector<DType>& inner = {});
// The inverse of type_str on a whole type; throws kDType on a malformed name.
std::vector<DType> type_from_str(const std::string& name);

}  // namespace twinfer
