#include "ops/elementwise/typeset.h"

namespace twinfer::ew {

unsigned type_bit(DType dt) {
  switch (dt) {
    case DType::kFloat32: return kF32;
    case DType::kFloat64: return kF64;
    case DType::kFloat16: return kF16;
    case DType::kBFloat16: return kBF16;
    case DType::kInt8: return kI8;
    case DType::kUInt8: return kU8;
    case DType::kInt16: return kI16;
    case DType::kUInt16: return kU16;
    case DType::kInt32: return kI32;
    case DType::kUInt32: return kU32;
    case DType::kInt64: return kI64;
    case DType::kUInt64: return kU64;
    case DType::kBool: return kBool;
    default: return 0;
  }
}

std::string typeset_str(unsigned set) {
  static const DType all[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                              DType::kInt8,    DType::kUInt8,   DType::kInt16,   DType::kUInt16,
                              DType::kInt32,   DType::kUInt32,  DType::kInt64,   DType::kUInt64,
                              DType::kBool};
  std::string r;
  for (DType d : all)
    if (in_typeset(set, d)) r += (r.empty() ? "" : ", ") + std::string(dtype_name(d));
  return r;
}

bool check_input_dtype(const KernelBuildInfo& info, size_t i, unsigned set, std::string* why) {
  DType dt = info.input_dtype(i);
  if (in_typeset(set, dt)) return true;
  if (why)
    *why = info.node().op_type + " does not support dtype " + dtype_name(dt) + " for input " +
           std::to_string(i) + " (supported: " + typeset_str(set) + ")";
  return false;
}

bool check_same_dtype(const KernelBuildInfo& info, std::initializer_list<size_t> inputs,
                      std::string* why) {
  DType first = DType::kUndefined;
  size_t first_i = 0;
  for (size_t i : inputs) {
    if (!info.has_input(i)) continue;
    DType dt = info.input_dtype(i);
    if (first == DType::kUndefined) {
      first = dt;
      first_i = i;
    } else if (dt != first) {
      if (why)
        *why = info.node().op_type + " needs inputs of one dtype, got " + dtype_name(first) +
               " (input " + std::to_string(first_i) + ") and " + dtype_name(dt) + " (input " +
               std::to_string(i) + ")";
      return false;
    }
  }
  return true;
}

}  // namespace twinfer::ew
