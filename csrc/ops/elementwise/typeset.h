// Sets of dtypes an elementwise op accepts, as compile-time bit masks, and a
// dispatch that instantiates the kernel body only for the types in the set
// (so e.g. Abs is never compiled for bool, nor Sqrt for int8).
#pragma once
#include <initializer_list>
#include <string>

#include "core/dispatch.h"
#include "ops/kernel.h"

namespace twinfer::ew {

enum TypeBit : unsigned {
  kF32 = 1u << 0, kF64 = 1u << 1, kF16 = 1u << 2, kBF16 = 1u << 3,
  kI8 = 1u << 4, kU8 = 1u << 5, kI16 = 1u << 6, kU16 = 1u << 7,
  kI32 = 1u << 8, kU32 = 1u << 9, kI64 = 1u << 10, kU64 = 1u << 11,
  kBool = 1u << 12,
};
constexpr unsigned kFloatTypes = kF32 | kF64 | kF16 | kBF16;
constexpr unsigned kSignedIntTypes = kI8 | kI16 | kI32 | kI64;
constexpr unsigned kUnsignedIntTypes = kU8 | kU16 | kU32 | kU64;
constexpr unsigned kIntTypes = kSignedIntTypes | kUnsignedIntTypes;
constexpr unsigned kSignedTypes = kFloatTypes | kSignedIntTypes;
constexpr unsigned kNumericTypes = kFloatTypes | kIntTypes;
constexpr unsigned kAllTypes = kNumericTypes | kBool;

unsigned type_bit(DType dt);  // 0 for string/undefined
inline bool in_typeset(unsigned set, DType dt) { return (set & type_bit(dt)) != 0; }
std::string typeset_str(unsigned set);  // "float32, float64, ..."

// The supports() check: input `i` has a dtype in `set`, else *why says which
// dtype came and which are accepted.
bool check_input_dtype(const KernelBuildInfo& info, size_t i, unsigned set, std::string* why);
// All present inputs in `inputs` have the dtype of the first of them.
bool check_same_dtype(const KernelBuildInfo& info, std::initializer_list<size_t> inputs,
                      std::string* why);

// Calls f(TypeTag<T>{}) for the storage type T of dt when dt is in Set.
template <unsigned Set, typename F>
void dispatch_typeset(DType dt, F&& f) {
#define TWINFER_EW_CASE(bit, dtype, T)                 \
  case DType::dtype:                                   \
    if constexpr ((Set & bit) != 0) {                  \
      f(TypeTag<T>{});                                 \
      return;                                          \
    }                                                  \
    break;
  switch (dt) {
    TWINFER_EW_CASE(kF32, kFloat32, float)
    TWINFER_EW_CASE(kF64, kFloat64, double)
    TWINFER_EW_CASE(kF16, kFloat16, half_t)
    TWINFER_EW_CASE(kBF16, kBFloat16, bfloat16_t)
    TWINFER_EW_CASE(kI8, kInt8, int8_t)
    TWINFER_EW_CASE(kU8, kUInt8, uint8_t)
    TWINFER_EW_CASE(kI16, kInt16, int16_t)
    TWINFER_EW_CASE(kU16, kUInt16, uint16_t)
    TWINFER_EW_CASE(kI32, kInt32, int32_t)
    TWINFER_EW_CASE(kU32, kUInt32, uint32_t)
    TWINFER_EW_CASE(kI64, kInt64, int64_t)
    TWINFER_EW_CASE(kU64, kUInt64, uint64_t)
    TWINFER_EW_CASE(kBool, kBool, bool)
    default:
      break;
  }
#undef TWINFER_EW_CASE
  // supports() rejected this dtype already; reaching here is a planner bug.
  dispatch_unsupported(dt, "this elementwise kernel");
}

// Elements per thread below which a loop stays single-threaded: cheap ops
// (add, compare) are memory bound, so threads only pay off on big tensors.
constexpr int64_t kGrainCheap = 32768;
constexpr int64_t kGrainExpensive = 4096;  // libm calls: exp, erf, tanh, ...

}  // namespace twinfer::ew
