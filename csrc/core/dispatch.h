// Map a runtime DType onto a C++ type and call a generic lambda with it:
//
//   dispatch_float(dt, [&](auto tag) { using T = typename decltype(tag)::type; ... });
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"
#include "core/float8.h"
#include "core/half.h"

namespace twinfer {

template <typename T> struct TypeTag { using type = T; };

template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::kFloat32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::kFloat64; };
template <> struct DTypeOf<half_t> { static constexpr DType value = DType::kFloat16; };
template <> struct DTypeOf<bfloat16_t> { static constexpr DType value = DType::kBFloat16; };
template <> struct DTypeOf<int8_t> { static constexpr DType value = DType::kInt8; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::kUInt8; };
template <> struct DTypeOf<int16_t> { static constexpr DType value = DType::kInt16; };
template <> struct DTypeOf<uint16_t> { static constexpr DType value = DType::kUInt16; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::kInt32; };
template <> struct DTypeOf<uint32_t> { static constexpr DType value = DType::kUInt32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::kInt64; };
template <> struct DTypeOf<uint64_t> { static constexpr DType value = DType::kUInt64; };
template <> struct DTypeOf<bool> { static constexpr DType value = DType::kBool; };
template <> struct DTypeOf<float8_e4m3fn_t> { static constexpr DType value = DType::kFloat8E4M3FN; };
template <> struct DTypeOf<float8_e4m3fnuz_t> { static constexpr DType value = DType::kFloat8E4M3FNUZ; };
template <> struct DTypeOf<float8_e5m2_t> { static constexpr DType value = DType::kFloat8E5M2; };
template <> struct DTypeOf<float8_e5m2fnuz_t> { static constexpr DType value = DType::kFloat8E5M2FNUZ; };
template <> struct DTypeOf<float8_e8m0_t> { static constexpr DType value = DType::kFloat8E8M0; };

[[noreturn]] inline void dispatch_unsupported(DType dt, const char* what) {
  throw Error(ErrorKind::kDType, std::string(what) + " does not support dtype " + dtype_name(dt));
}

// float32 / float64 (compute types on the CPU).
template <typename F>
void dispatch_float(DType dt, F&& f) {
  switch (dt) {
    case DType::kFloat32: f(TypeTag<float>{}); return;
    case DType::kFloat64: f(TypeTag<double>{}); return;
    default: dispatch_unsupported(dt, "this kernel");
  }
}

// Signed/unsigned integers.
template <typename F>
void dispatch_integer(DType dt, F&& f) {
  switch (dt) {
    case DType::kInt8: f(TypeTag<int8_t>{}); return;
    case DType::kUInt8: f(TypeTag<uint8_t>{}); return;
    case DType::kInt16: f(TypeTag<int16_t>{}); return;
    case DType::kUInt16: f(TypeTag<uint16_t>{}); return;
    case DType::kInt32: f(TypeTag<int32_t>{}); return;
    case DType::kUInt32: f(TypeTag<uint32_t>{}); return;
    case DType::kInt64: f(TypeTag<int64_t>{}); return;
    case DType::kUInt64: f(TypeTag<uint64_t>{}); return;
    default: dispatch_unsupported(dt, "this kernel");
  }
}

// Every arithmetic type (float32/64 and integers), not half types or bool.
template <typename F>
void dispatch_numeric(DType dt, F&& f) {
  if (dt == DType::kFloat32 || dt == DType::kFloat64)
    dispatch_float(dt, f);
  else
    dispatch_integer(dt, f);
}

// The four sign/exponent/mantissa 8-bit floats (not E8M0, which has its own
// rounding modes): f(TypeTag<float8_e4m3fn_t>{}) etc.; Float8Traits<T>::fmt()
// gives the format for float8_to_float / float_to_float8.
template <typename F>
void dispatch_float8(DType dt, F&& f) {
  switch (dt) {
    case DType::kFloat8E4M3FN: f(TypeTag<float8_e4m3fn_t>{}); return;
    case DType::kFloat8E4M3FNUZ: f(TypeTag<float8_e4m3fnuz_t>{}); return;
    case DType::kFloat8E5M2: f(TypeTag<float8_e5m2_t>{}); return;
    case DType::kFloat8E5M2FNUZ: f(TypeTag<float8_e5m2fnuz_t>{}); return;
    default: dispatch_unsupported(dt, "this kernel");
  }
}

// Any fixed-size type by its byte width only (for data movement ops).
template <typename F>
void dispatch_bytes(DType dt, F&& f) {
  switch (dtype_size(dt)) {
    case 1: f(TypeTag<uint8_t>{}); return;
    case 2: f(TypeTag<uint16_t>{}); return;
    case 4: f(TypeTag<uint32_t>{}); return;
    case 8: f(TypeTag<uint64_t>{}); return;
    default: dispatch_unsupported(dt, "this kernel");
  }
}

}  // namespace twinfer
