#include "core/dtype.h"

#include "core/error.h"

namespace twinfer {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kFloat32: return 4;
    case DType::kFloat16: return 2;
    case DType::kBFloat16: return 2;
    case DType::kFloat64: return 8;
    case DType::kInt8: return 1;
    case DType::kUInt8: return 1;
    case DType::kInt16: return 2;
    case DType::kUInt16: return 2;
    case DType::kInt32: return 4;
    case DType::kUInt32: return 4;
    case DType::kInt64: return 8;
    case DType::kUInt64: return 8;
    case DType::kBool: return 1;
    case DType::kFloat8E4M3FN:
    case DType::kFloat8E4M3FNUZ:
    case DType::kFloat8E5M2:
    case DType::kFloat8E5M2FNUZ:
    case DType::kFloat8E8M0: return 1;
    case DType::kInt4:  // unpacked: one byte each (see dtype.h)
    case DType::kUInt4:
    case DType::kFloat4E2M1:
    case DType::kInt2:
    case DType::kUInt2: return 1;
    case DType::kString: return sizeof(std::string);
    case DType::kSequence:  // host objects, not arrays: no element bytes
    case DType::kOptional:
    case DType::kMap:
    case DType::kUndefined: return 0;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat64: return "float64";
    case DType::kInt8: return "int8";
    case DType::kUInt8: return "uint8";
    case DType::kInt16: return "int16";
    case DType::kUInt16: return "uint16";
    case DType::kInt32: return "int32";
    case DType::kUInt32: return "uint32";
    case DType::kInt64: return "int64";
    case DType::kUInt64: return "uint64";
    case DType::kBool: return "bool";
    // The ml_dtypes names, so Python maps them with getattr(ml_dtypes, name).
    case DType::kFloat8E4M3FN: return "float8_e4m3fn";
    case DType::kFloat8E4M3FNUZ: return "float8_e4m3fnuz";
    case DType::kFloat8E5M2: return "float8_e5m2";
    case DType::kFloat8E5M2FNUZ: return "float8_e5m2fnuz";
    case DType::kFloat8E8M0: return "float8_e8m0fnu";
    case DType::kInt4: return "int4";
    case DType::kUInt4: return "uint4";
    case DType::kFloat4E2M1: return "float4_e2m1fn";
    case DType::kInt2: return "int2";
    case DType::kUInt2: return "uint2";
    case DType::kString: return "string";
    case DType::kSequence: return "sequence";
    case DType::kOptional: return "optional";
    case DType::kMap: return "map";
    case DType::kUndefined: return "undefined";
  }
  return "undefined";
}

bool dtype_is_float(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16 ||
         t == DType::kFloat64;
}

bool dtype_is_float8(DType t) {
  return t == DType::kFloat8E4M3FN || t == DType::kFloat8E4M3FNUZ || t == DType::kFloat8E5M2 ||
         t == DType::kFloat8E5M2FNUZ || t == DType::kFloat8E8M0;
}

bool dtype_is_subbyte(DType t) {
  return t == DType::kInt4 || t == DType::kUInt4 || t == DType::kFloat4E2M1 || t == DType::kInt2 ||
         t == DType::kUInt2;
}

int dtype_bits(DType t) {
  switch (t) {
    case DType::kInt4: case DType::kUInt4: case DType::kFloat4E2M1: return 4;
    case DType::kInt2: case DType::kUInt2: return 2;
    default: return static_cast<int>(8 * dtype_size(t));
  }
}

bool dtype_is_integer(DType t) {
  switch (t) {
    case DType::kInt8: case DType::kUInt8: case DType::kInt16: case DType::kUInt16:
    case DType::kInt32: case DType::kUInt32: case DType::kInt64: case DType::kUInt64:
      return true;
    default:
      return false;
  }
}

bool dtype_is_signed(DType t) {
  return t == DType::kInt8 || t == DType::kInt16 || t == DType::kInt32 || t == DType::kInt64 ||
         dtype_is_float(t) || (dtype_is_float8(t) && t != DType::kFloat8E8M0) || t == DType::kInt4 ||
         t == DType::kInt2 || t == DType::kFloat4E2M1;
}

// Codes from onnx.proto TensorProto.DataType.
DType dtype_from_onnx(int32_t c) {
  switch (c) {
    case 1: return DType::kFloat32;
    case 2: return DType::kUInt8;
    case 3: return DType::kInt8;
    case 4: return DType::kUInt16;
    case 5: return DType::kInt16;
    case 6: return DType::kInt32;
    case 7: return DType::kInt64;
    case 8: return DType::kString;
    case 9: return DType::kBool;
    case 10: return DType::kFloat16;
    case 11: return DType::kFloat64;
    case 12: return DType::kUInt32;
    case 13: return DType::kUInt64;
    case 16: return DType::kBFloat16;
    case 17: return DType::kFloat8E4M3FN;
    case 18: return DType::kFloat8E4M3FNUZ;
    case 19: return DType::kFloat8E5M2;
    case 20: return DType::kFloat8E5M2FNUZ;
    case 21: return DType::kUInt4;
    case 22: return DType::kInt4;
    case 23: return DType::kFloat4E2M1;
    case 24: return DType::kFloat8E8M0;
    case 25: return DType::kUInt2;
    case 26: return DType::kInt2;
    default: return DType::kUndefined;
  }
}

int32_t dtype_to_onnx(DType t) {
  switch (t) {
    case DType::kFloat32: return 1;
    case DType::kUInt8: return 2;
    case DType::kInt8: return 3;
    case DType::kUInt16: return 4;
    case DType::kInt16: return 5;
    case DType::kInt32: return 6;
    case DType::kInt64: return 7;
    case DType::kString: return 8;
    case DType::kBool: return 9;
    case DType::kFloat16: return 10;
    case DType::kFloat64: return 11;
    case DType::kUInt32: return 12;
    case DType::kUInt64: return 13;
    case DType::kBFloat16: return 16;
    case DType::kFloat8E4M3FN: return 17;
    case DType::kFloat8E4M3FNUZ: return 18;
    case DType::kFloat8E5M2: return 19;
    case DType::kFloat8E5M2FNUZ: return 20;
    case DType::kUInt4: return 21;
    case DType::kInt4: return 22;
    case DType::kFloat4E2M1: return 23;
    case DType::kFloat8E8M0: return 24;
    case DType::kUInt2: return 25;
    case DType::kInt2: return 26;
    case DType::kSequence:
    case DType::kOptional:
    case DType::kMap:
    case DType::kUndefined: return 0;
  }
  return 0;
}

DType dtype_from_name(const std::string& n) {
  for (int i = 0; i <= static_cast<int>(DType::kString); ++i) {
    auto t = static_cast<DType>(i);
    if (n == dtype_name(t)) return t;
  }
  if (n == "float" || n == "float32") return DType::kFloat32;
  if (n == "half") return DType::kFloat16;
  if (n == "double") return DType::kFloat64;
  if (n == "bool_") return DType::kBool;
  throw Error(ErrorKind::kDType, "unknown dtype name '" + n + "'");
}

bool dtype_is_container(DType t) { return t == DType::kSequence || t == DType::kOptional || t == DType::kMap; }

std::string type_str(DType outer, const std::vector<DType>& inner) {
  if (!dtype_is_container(outer)) return dtype_name(outer);
  std::string s = std::string(dtype_name(outer)) + "(";
  if (inner.empty()) return s + "?)";
  if (outer == DType::kMap) {  // key type, then the value's full type
    s += std::string(dtype_name(inner[0])) + ",";
    if (inner.size() == 1) return s + "?)";
    return s + type_str(inner[1], std::vector<DType>(inner.begin() + 2, inner.end())) + ")";
  }
  s += type_str(inner[0], std::vector<DType>(inner.begin() + 1, inner.end()));
  return s + ")";
}

std::vector<DType> type_from_str(const std::string& name) {
  std::vector<DType> r;
  std::string rest = name;
  for (;;) {
    const size_t open = rest.find('(');
    if (open == std::string::npos) break;
    const std::string head = rest.substr(0, open);
    if ((head != "sequence" && head != "optional" && head != "map") || rest.back() != ')')
      throw Error(ErrorKind::kDType, "malformed type name '" + name + "'");
    rest = rest.substr(open + 1, rest.size() - open - 2);
    if (head == "map") {  // map(KEY,VALUE): the key is a plain dtype
      const size_t comma = rest.find(',');
      if (comma == std::string::npos) throw Error(ErrorKind::kDType, "malformed type name '" + name + "'");
      r.push_back(DType::kMap);
      r.push_back(dtype_from_name(rest.substr(0, comma)));
      rest = rest.substr(comma + 1);
      continue;
    }
    r.push_back(head == "sequence" ? DType::kSequence : DType::kOptional);
  }
  r.push_back(dtype_from_name(rest));
  return r;
}

}  // namespace twinfer
